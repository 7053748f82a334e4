//! Wall-clock times as zpool prints them (UTC; cairn reads no time zone database).

use cairn_objset::calendar::civil_from_days;

fn split(secs: u64) -> ((i64, u32, u32), u64, u64, u64) {
    let rem = secs % 86_400;
    (
        civil_from_days((secs / 86_400) as i64),
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
    )
}

/// `YYYY-MM-DD.HH:MM:SS`, as `zpool history` prints.
pub fn history_time(secs: u64) -> String {
    let ((y, m, d), hh, mm, ss) = split(secs);
    format!("{y:04}-{m:02}-{d:02}.{hh:02}:{mm:02}:{ss:02}")
}

/// `Nov 24 2026 21:40:43.123456789`, as `zpool events` prints.
pub fn event_time(ns: u64) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let ((y, m, d), hh, mm, ss) = split(ns / 1_000_000_000);
    let month = MONTHS[(m as usize - 1) % 12];
    format!(
        "{month} {d:02} {y:04} {hh:02}:{mm:02}:{ss:02}.{:09}",
        ns % 1_000_000_000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_as_zpool_does() {
        assert_eq!(history_time(0), "1970-01-01.00:00:00");
        assert_eq!(history_time(951_782_400), "2000-02-29.00:00:00");
        assert_eq!(history_time(1_795_556_443), "2026-11-24.21:40:43");
        assert_eq!(
            event_time(1_795_556_443_000_000_123),
            "Nov 24 2026 21:40:43.000000123"
        );
    }
}
