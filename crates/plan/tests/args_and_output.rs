//! Command-line handling and machine-readable output.

use cairn_plan::{context_from_args, output, plan, PlanArgs, PlanError};
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: PlanArgs,
}

fn args(line: &str) -> PlanArgs {
    Cli::try_parse_from(std::iter::once("plan").chain(line.split_whitespace()))
        .unwrap()
        .args
}

#[test]
fn json_has_every_documented_field() {
    let context = context_from_args(&args("--disks 24x4TB --zfs 0.7 --ashift 9")).unwrap();
    let rows = plan(&context);
    let json: serde_json::Value =
        serde_json::from_str(&output::json(&context, &rows).unwrap()).unwrap();
    let layouts = json["layouts"].as_array().unwrap();
    assert_eq!(layouts.len(), rows.len());
    for field in [
        "kind",
        "groups",
        "width",
        "spares",
        "disks_used",
        "avail_bytes",
        "size_bytes",
        "efficiency",
        "tolerates_min",
        "tolerates_max",
        "mttdl_hours",
        "p_loss",
        "rebuild_hours",
        "seq_read_mbs",
        "seq_write_mbs",
        "rand_read_iops",
        "rand_write_iops",
        "pareto",
    ] {
        assert!(
            layouts.iter().all(|l| !l[field].is_null()),
            "{field} missing"
        );
    }
    let kinds: Vec<&str> = layouts
        .iter()
        .map(|l| l["kind"].as_str().unwrap())
        .collect();
    for kind in ["stripe", "mirror", "raidz1", "raidz2", "raidz3"] {
        assert!(kinds.contains(&kind));
    }
    let raidz2 = layouts
        .iter()
        .find(|l| l["kind"] == "raidz2" && l["groups"] == 1 && l["width"] == 24)
        .unwrap();
    // The article's 82.0 (bytes / 1024e9).
    assert_eq!(
        (raidz2["avail_bytes"].as_u64().unwrap() as f64 / 1.024e11).floor(),
        820.0
    );
}

#[test]
fn csv_has_a_row_per_layout() {
    let context = context_from_args(&args("--disks 28x1000194703360B")).unwrap();
    let rows = plan(&context);
    let csv = output::csv(&rows);
    assert_eq!(csv.lines().count(), rows.len() + 1);
    assert!(csv.contains("\"3 × raidz2 of 9 + 1 spare\""));
}

#[test]
fn table_is_readable() {
    let context = context_from_args(&args("--disks 12xWD4001FYYG --sort capacity")).unwrap();
    let rows = output::sorted(&plan(&context), output::SortKey::Capacity);
    let text = output::table(&context, &rows);
    assert!(text.contains("stripe of 12"));
    assert!(text.contains("recommended (capacity × speed)"));
    assert!(rows
        .windows(2)
        .all(|w| w[0].avail_bytes >= w[1].avail_bytes));
}

#[test]
fn disk_bytes_overrides_and_mixed_disks() {
    let context = context_from_args(&args("--disks 4x4TB --disk-bytes 1000194703360")).unwrap();
    assert!(context.disks.iter().all(|d| d.bytes == 1_000_194_703_360));
    let context = context_from_args(&args("--disks 2x3TB --disks 4x4TB --kind ssd")).unwrap();
    assert_eq!(context.disks.len(), 6);
    assert!(context.disks[0].bytes > context.disks[5].bytes);
    assert_eq!(
        plan(&context).len(),
        cairn_plan::enumerate::enumerate_layouts(6).len()
    );
}

#[test]
fn bad_input_gives_errors_not_panics() {
    let cases = [
        ("--disks 24xfoo", "COUNTxSIZE"),
        ("--disks 24x4TB --zfs 0.5", "cairn, 2.1"),
        ("--disks 24x4TB --ashift 20", "9..=16"),
        ("--disks 24x4TB --afr 200%", "percentage"),
        ("--disks 24x4TB --ber x", "1e-15"),
        ("--disks 24x4TB --rebuild-rate fast", "150MB/s"),
        ("--disks 24x4TB --recordsize 0", "128K"),
        ("--disks 24x4TB --years 0", "positive"),
        ("--disks 3x1MB", "64 MiB"),
    ];
    for (line, hint) in cases {
        let error: PlanError = context_from_args(&args(line)).unwrap_err();
        assert!(error.to_string().contains(hint), "{line}: {error}");
    }
}

#[test]
fn plots_render_both_formats() {
    let context = context_from_args(&args("--disks 8x4TB")).unwrap();
    let rows = plan(&context);
    let svg = cairn_plan::plot::plot_svg(&context, &rows);
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<circle").count(), rows.len() + 2);
    let png = cairn_plan::plot::plot_png(&context, &rows);
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("plot.gif");
    assert!(cairn_plan::plot::write_plot(&bad, &context, &rows).is_err());
}
