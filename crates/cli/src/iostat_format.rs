//! How `cairn iostat` prints figures, as zpool does: compact counts, latencies, and the
//! group header line. Shared by the table (`crate::iostat_cmd`) and the per-class parts
//! (`crate::iostat_classes`).

/// Average latency: "-" with no requests; ns with -p, else us/ms/s.
pub(crate) fn latency(total_ns: u64, ops: u64, parsable: bool) -> String {
    if ops == 0 {
        return "-".into();
    }
    let ns = total_ns / ops;
    if parsable {
        return ns.to_string();
    }
    match ns {
        n if n < 1_000 => format!("{n}ns"),
        n if n < 1_000_000 => format!("{}us", n / 1_000),
        n if n < 1_000_000_000 => format!("{}ms", n / 1_000_000),
        n => format!("{}s", n / 1_000_000_000),
    }
}

/// zpool's compact counts: 0, 12, 1.5K, 3M.
pub(crate) fn format_count(n: f64) -> String {
    if n < 1000.0 {
        return format!("{}", n.round() as u64);
    }
    for (unit, div) in [("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)] {
        if n >= div {
            let v = n / div;
            return if v < 10.0 {
                format!("{v:.1}{unit}")
            } else {
                format!("{}{unit}", v.round() as u64)
            };
        }
    }
    unreachable!("n >= 1000 matched K")
}

/// The first header line: each group label ("capacity", "total_wait") centred over the
/// columns it heads — itself and the empty cells after it — as zpool's.
pub(crate) fn group_line(head1: &[&str], name_w: usize, w: usize) -> String {
    let mut s = format!("{:<name_w$}", head1[0]);
    let mut i = 1;
    while i < head1.len() {
        let span = 1 + head1[i + 1..].iter().take_while(|c| c.is_empty()).count();
        let width = span * w + (span - 1) * 2;
        s += &format!("  {:^width$}", head1[i]);
        i += span;
    }
    s.trim_end().to_string() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_print_as_zpool_does() {
        assert_eq!(format_count(0.0), "0");
        assert_eq!(format_count(999.4), "999");
        assert_eq!(format_count(1500.0), "1.5K");
        assert_eq!(format_count(25_000.0), "25K");
        assert_eq!(format_count(3.2e6), "3.2M");
        assert_eq!(latency(0, 0, false), "-");
        assert_eq!(latency(3_000_000, 2, false), "1ms");
        assert_eq!(latency(3_000_000, 2, true), "1500000");
    }
}
