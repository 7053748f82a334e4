//! `cairn bench parity --quick` end to end: runs, writes JSON, and every implementation
//! (cairn kernels and, when installed, ISA-L) produced the reference bytes.

use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: cairn_bench::ParityBenchArgs,
}

#[test]
fn quick_run_writes_verified_json() {
    let path = std::env::temp_dir().join(format!("cairn-parity-bench-{}.json", std::process::id()));
    let path_arg = path.to_str().expect("utf-8 temp path");
    let cli = Cli::parse_from(["parity", "--quick", "--json", "--json-out", path_arg]);
    cairn_bench::run(&cairn_bench::BenchCommand::Parity(cli.args)).expect("bench runs");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("JSON written")).unwrap();
    std::fs::remove_file(&path).ok();
    let results = report["results"].as_array().expect("results array");
    assert!(results.len() >= 6, "one figure per op at least");
    for r in results {
        assert_eq!(r["verified"], serde_json::Value::Bool(true), "{r}");
        assert!(r["gbps"].as_f64().unwrap() > 0.0);
    }
    if report["isal"].is_string() {
        assert!(results
            .iter()
            .any(|r| r["implementation"].as_str().unwrap().starts_with("isal")));
    }
}

#[test]
fn rejects_unknown_kernel() {
    let cli = Cli::parse_from(["parity", "--quick", "--kernel", "nope"]);
    let err = cairn_bench::run(&cairn_bench::BenchCommand::Parity(cli.args)).unwrap_err();
    assert!(err.to_string().contains("unknown kernel"));
}
