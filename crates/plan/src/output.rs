//! Printing the plan: a table a ZFS user can read at a glance, JSON and CSV.

use std::fmt::Write;

use crate::evaluate::{Evaluation, PlanContext};
use crate::reliability::HOURS_PER_YEAR;
use cairn_geometry::format_zfs_size;

/// Row order of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SortKey {
    /// Stripe, mirrors, raidz1, raidz2, raidz3 (widest first).
    Layout,
    /// Most usable space first.
    Capacity,
    /// Fastest first (geometric mean of the four speed figures).
    Performance,
    /// Lowest risk of data loss first.
    Integrity,
    /// Shortest rebuild first.
    Rebuild,
}

/// The rows in `key` order (stable: ties keep the enumeration order).
pub fn sorted(rows: &[Evaluation], key: SortKey) -> Vec<Evaluation> {
    let mut rows = rows.to_vec();
    match key {
        SortKey::Layout => {}
        SortKey::Capacity => rows.sort_by_key(|r| std::cmp::Reverse(r.avail_bytes)),
        SortKey::Performance => rows.sort_by(|a, b| b.perf_score.total_cmp(&a.perf_score)),
        SortKey::Integrity => rows.sort_by(|a, b| a.p_loss.total_cmp(&b.p_loss)),
        SortKey::Rebuild => rows.sort_by(|a, b| a.rebuild_hours.total_cmp(&b.rebuild_hours)),
    }
    rows
}

/// A probability as a percentage, or in scientific notation when tiny.
pub fn format_probability(p: f64) -> String {
    if p >= 0.0001 {
        format!("{:.2}%", p * 100.0)
    } else if p > 0.0 {
        format!("{:.1e}", p)
    } else {
        "0".to_string()
    }
}

/// Years in a compact form: `12`, `3.4e5`.
fn format_years(hours: f64) -> String {
    let years = hours / HOURS_PER_YEAR;
    if years < 1000.0 {
        format!("{years:.1}")
    } else {
        format!("{years:.1e}")
    }
}

fn percent(fraction: f64) -> String {
    format!("{:.0}%", fraction * 100.0)
}

/// Header lines describing the disks and the assumptions.
pub fn describe_context(context: &PlanContext) -> String {
    let disk = context.reference_disk();
    let distinct: Vec<String> = {
        let mut names: Vec<(String, usize)> = Vec::new();
        for d in &context.disks {
            match names.iter_mut().find(|(n, _)| *n == d.name) {
                Some((_, count)) => *count += 1,
                None => names.push((d.name.clone(), 1)),
            }
        }
        names
            .into_iter()
            .map(|(name, count)| format!("{count} × {name}"))
            .collect()
    };
    let sizes: Vec<String> = {
        let mut sizes: Vec<u64> = context.disks.iter().map(|d| d.bytes).collect();
        sizes.dedup();
        sizes
            .iter()
            .map(|b| format!("{} B ({})", group_thousands(*b), format_zfs_size(*b)))
            .collect()
    };
    format!(
        "cairn plan: {disks} — {sizes}\n\
         disk: {kind} {seq:.0} MB/s, {iops:.0}/{wiops:.0} IOPS, AFR {afr:.2}%, BER {ber:.0e}; \
         ashift {ashift}, recordsize {rs}, ZFS space rules: {era}\n\
         risk over {years} years; resilver at {rebuild:.0} MB/s of a {fill:.0}% full pool, \
         one disk at a time, +{replace} h to replace a disk when there is no hot spare\n",
        disks = distinct.join(" + "),
        sizes = sizes.join(", "),
        kind = disk.kind.name(),
        seq = disk.seq_mbs,
        iops = disk.rand_read_iops,
        wiops = disk.rand_write_iops,
        afr = disk.afr * 100.0,
        ber = disk.ber,
        ashift = context.ashift,
        rs = format_zfs_size(context.recordsize),
        era = context.era,
        years = context.years,
        rebuild = context.rebuild_mbs,
        fill = context.fill * 100.0,
        replace = context.replace_hours,
    )
}

fn group_thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The human-readable table, with a legend and a recommendation.
pub fn table(context: &PlanContext, rows: &[Evaluation]) -> String {
    let mut out = describe_context(context);
    out.push('\n');
    let rs = format_zfs_size(context.recordsize);
    let _ = writeln!(
        out,
        "  {:<30} {:>6} {:>5} {:>6} {:>4} {:>9} {:>5} {:>9} {:>9} {:>7} {:>12} {:>13}",
        "layout",
        "AVAIL",
        "df-h",
        "SIZE",
        "eff",
        format!("par+pad@{rs}"),
        "lose",
        "MTTDL y",
        format!("P(loss){}y", context.years),
        "rebuild",
        "seq R/W MB/s",
        "rand R/W IOPS"
    );
    for row in rows {
        let _ = writeln!(
            out,
            "{} {:<30} {:>6} {:>5} {:>6} {:>4} {:>9} {:>5} {:>9} {:>9} {:>7} {:>12} {:>13}",
            if row.pareto { '*' } else { ' ' },
            row.layout,
            row.avail_zfs,
            row.avail_df,
            row.size_zfs,
            percent(row.efficiency),
            format!(
                "{}+{}",
                percent(row.parity_overhead),
                percent(row.padding_overhead)
            ),
            format!("{}/{}", row.tolerates_min, row.tolerates_max),
            format_years(row.mttdl_hours),
            format_probability(row.p_loss),
            format!("{:.1}h", row.rebuild_hours),
            format!("{:.0}/{:.0}", row.seq_read_mbs, row.seq_write_mbs),
            format!("{:.0}/{:.0}", row.rand_read_iops, row.rand_write_iops),
        );
    }
    out.push_str(
        "\nAVAIL = `zfs list` on the empty pool, df-h = `df -h`, SIZE = `zpool list`; eff = AVAIL / raw bytes of all disks;\n\
         par+pad = parity (or extra copies) + RAID-Z padding in one record; lose = disks that can fail: any / at best;\n\
         MTTDL and P(loss) include unrecoverable read errors during rebuilds; speeds are ceilings from per-disk figures.\n\
         * = Pareto front: no other layout has more space, more speed and less risk at once.\n\n",
    );
    out.push_str(&recommendation(context, rows));
    out
}

/// Risk the recommendation accepts over the horizon.
pub const ACCEPTABLE_P_LOSS: f64 = 0.001;

/// Capacity × speed, the quantity the balanced recommendation maximises.
fn balance(row: &Evaluation) -> f64 {
    row.avail_bytes as f64 * row.perf_score
}

fn best_by<'a>(
    rows: &[&'a Evaluation],
    better: impl Fn(&Evaluation, &Evaluation) -> std::cmp::Ordering,
) -> &'a Evaluation {
    rows.iter()
        .copied()
        .max_by(|a, b| better(a, b))
        .expect("called with at least one row")
}

/// The recommended (balanced) layout: most capacity × speed among layouts whose risk is
/// acceptable, if any.
pub fn recommended(rows: &[Evaluation]) -> Option<&Evaluation> {
    let acceptable: Vec<&Evaluation> = rows
        .iter()
        .filter(|r| r.p_loss <= ACCEPTABLE_P_LOSS)
        .collect();
    (!acceptable.is_empty()).then(|| best_by(&acceptable, |a, b| balance(a).total_cmp(&balance(b))))
}

/// A short recommendation: among layouts whose risk is acceptable, the most space, the
/// fastest and the best balance of the two; and the safest layout overall.
pub fn recommendation(context: &PlanContext, rows: &[Evaluation]) -> String {
    let mut out = String::new();
    let acceptable: Vec<&Evaluation> = rows
        .iter()
        .filter(|r| r.p_loss <= ACCEPTABLE_P_LOSS)
        .collect();
    let threshold = format_probability(ACCEPTABLE_P_LOSS);
    let years = context.years;
    if acceptable.is_empty() {
        let _ = writeln!(
            out,
            "No layout keeps P(loss over {years} y) under {threshold}: add parity or spares, or shorten rebuilds (--rebuild-rate)."
        );
    } else {
        let _ = writeln!(
            out,
            "Among layouts with P(loss over {years} y) ≤ {threshold}:"
        );
        let balanced = best_by(&acceptable, |a, b| balance(a).total_cmp(&balance(b)));
        let most_space = best_by(&acceptable, |a, b| {
            a.avail_bytes
                .cmp(&b.avail_bytes)
                .then(b.p_loss.total_cmp(&a.p_loss))
        });
        let fastest = best_by(&acceptable, |a, b| {
            a.perf_score
                .total_cmp(&b.perf_score)
                .then(a.avail_bytes.cmp(&b.avail_bytes))
        });
        for (title, row) in [
            ("recommended (capacity × speed)", balanced),
            ("most space", most_space),
            ("fastest", fastest),
        ] {
            let _ = writeln!(
                out,
                "  {title:<31} {:<28} {:>6} usable, {:>4.1}× one disk's speed, survives {} failure(s), P(loss) {}",
                row.layout,
                row.avail_zfs,
                row.perf_score,
                row.tolerates_min,
                format_probability(row.p_loss)
            );
        }
        let _ = writeln!(out, "  cairn create tank {}", balanced.zpool);
    }
    let safest = best_by(&rows.iter().collect::<Vec<_>>(), |a, b| {
        b.p_loss
            .total_cmp(&a.p_loss)
            .then(a.avail_bytes.cmp(&b.avail_bytes))
    });
    let _ = writeln!(
        out,
        "Safest overall: {} — {} usable, P(loss) {}.",
        safest.layout,
        safest.avail_zfs,
        format_probability(safest.p_loss)
    );
    out
}

/// `{"disks": …, "layouts": [...]}`.
pub fn json(context: &PlanContext, rows: &[Evaluation]) -> Result<String, serde_json::Error> {
    let value = serde_json::json!({
        "disks": context.disks.len(),
        "disk": context.reference_disk(),
        "ashift": context.ashift,
        "recordsize": context.recordsize,
        "zfs": context.era.name(),
        "years": context.years,
        "rebuild_mbs": context.rebuild_mbs,
        "layouts": rows,
    });
    Ok(serde_json::to_string_pretty(&value)? + "\n")
}

/// CSV, one row per layout, the JSON fields as columns.
pub fn csv(rows: &[Evaluation]) -> String {
    let mut out = String::from(
        "layout,zpool,kind,groups,width,spares,disks_used,avail_bytes,size_bytes,efficiency,parity_overhead,padding_overhead,\
         tolerates_min,tolerates_max,mttdl_hours,p_loss,rebuild_hours,seq_read_mbs,seq_write_mbs,rand_read_iops,rand_write_iops,perf_score,pareto\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "\"{}\",\"{}\",{},{},{},{},{},{},{},{:.4},{:.4},{:.4},{},{},{:.6e},{:.6e},{:.2},{:.0},{:.0},{:.0},{:.0},{:.3},{}",
            r.layout, r.zpool, r.kind.name(), r.groups, r.width, r.spares, r.disks_used, r.avail_bytes, r.size_bytes,
            r.efficiency, r.parity_overhead, r.padding_overhead, r.tolerates_min, r.tolerates_max, r.mttdl_hours,
            r.p_loss, r.rebuild_hours, r.seq_read_mbs, r.seq_write_mbs, r.rand_read_iops, r.rand_write_iops,
            r.perf_score, r.pareto
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probabilities_and_thousands() {
        assert_eq!(format_probability(0.38), "38.00%");
        assert_eq!(format_probability(2.5e-7), "2.5e-7");
        assert_eq!(group_thousands(4_000_787_030_016), "4,000,787,030,016");
        assert_eq!(group_thousands(12), "12");
    }
}
