//! Automatic snapshots with retention, as zfs-auto-snapshot keeps them, run by the pool
//! service (`cairn serve`) once a minute.
//!
//! The inherited dataset property `snapshot:schedule` names periods and how many of each
//! to keep: `hourly=24,daily=7,weekly=4,monthly=12` (also `frequent`, every 15 minutes;
//! `none` turns it off). A period is due when the dataset has no automatic snapshot of it
//! taken since the period began (UTC); then one is taken, named
//! `auto_PERIOD-YYYY-MM-DD-HHMM` (the minute it was taken), and the oldest of that period
//! beyond its count are destroyed. Snapshots of other names are never touched.
//!
//! ```text
//!  schedule hourly=2, now 15:07 on 2026-11-25, existing: auto_hourly-2026-11-25-1300,
//!  auto_hourly-2026-11-25-1400
//!    hour began 15:00, newest 14:00 < 15:00 → take auto_hourly-2026-11-25-1507
//!    keep the newest 2 → destroy auto_hourly-2026-11-25-1300
//! ```

use crate::calendar::{civil_from_days, days_from_civil};
use crate::error::StoreError;

/// The property that holds a dataset's schedule.
pub const SCHEDULE_PROPERTY: &str = "snapshot:schedule";
/// Names of automatic snapshots start with this.
pub const PREFIX: &str = "auto_";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Period {
    Frequent,
    Hourly,
    Daily,
    Weekly,
    Monthly,
}

impl Period {
    const ALL: [Period; 5] = [
        Period::Frequent,
        Period::Hourly,
        Period::Daily,
        Period::Weekly,
        Period::Monthly,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Period::Frequent => "frequent",
            Period::Hourly => "hourly",
            Period::Daily => "daily",
            Period::Weekly => "weekly",
            Period::Monthly => "monthly",
        }
    }

    /// When the period that holds `now` (seconds since the epoch, UTC) began.
    pub fn start(self, now: u64) -> u64 {
        let day = now - now % 86_400;
        match self {
            Period::Frequent => now - now % 900,
            Period::Hourly => now - now % 3600,
            Period::Daily => day,
            // 1970-01-01 was a Thursday: Monday is 3 days later.
            Period::Weekly => {
                let days = now / 86_400;
                (days - (days + 3) % 7) * 86_400
            }
            Period::Monthly => {
                let (y, m, _) = civil_from_days((now / 86_400) as i64);
                days_from_civil(y, m, 1) as u64 * 86_400
            }
        }
    }
}

/// Periods and how many snapshots of each to keep.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    pub keep: Vec<(Period, usize)>,
}

impl Schedule {
    /// `none`, or `PERIOD=COUNT[,PERIOD=COUNT…]` with counts from 1 to 10,000.
    pub fn parse(value: &str) -> Result<Schedule, StoreError> {
        let bad =
            |why: String| StoreError::BadProperty(format!("{SCHEDULE_PROPERTY}={value}: {why}"));
        if value == "none" {
            return Ok(Schedule::default());
        }
        let mut keep = Vec::new();
        for part in value.split(',') {
            let (p, n) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("'{part}': use PERIOD=COUNT, e.g. hourly=24")))?;
            let period = Period::ALL
                .into_iter()
                .find(|x| x.name() == p)
                .ok_or_else(|| {
                    bad(format!(
                        "'{p}': periods are frequent, hourly, daily, weekly, monthly"
                    ))
                })?;
            let count: usize = n
                .parse()
                .ok()
                .filter(|c| (1..=10_000).contains(c))
                .ok_or_else(|| bad(format!("'{n}': keep from 1 to 10000")))?;
            if keep.iter().any(|(q, _)| *q == period) {
                return Err(bad(format!("'{p}' is given twice")));
            }
            keep.push((period, count));
        }
        Ok(Schedule { keep })
    }
}

/// What the service should do for one dataset: snapshot names to take and to destroy.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub take: Vec<String>,
    pub destroy: Vec<String>,
}

/// The automatic snapshot of `period` taken at `now`.
pub fn name_at(period: Period, now: u64) -> String {
    let (y, m, d) = civil_from_days((now / 86_400) as i64);
    let secs = now % 86_400;
    format!(
        "{PREFIX}{}-{y:04}-{m:02}-{d:02}-{:02}{:02}",
        period.name(),
        secs / 3600,
        secs % 3600 / 60
    )
}

/// When an automatic snapshot name says it was taken (`None` for other names).
pub fn taken_at(name: &str, period: Period) -> Option<u64> {
    let rest = name.strip_prefix(PREFIX)?.strip_prefix(period.name())?;
    let rest = rest.strip_prefix('-')?;
    let num = |s: &str| s.parse::<u64>().ok();
    let (y, m, d, hm) = (
        num(rest.get(0..4)?)?,
        num(rest.get(5..7)?)?,
        num(rest.get(8..10)?)?,
        num(rest.get(11..15)?)?,
    );
    if rest.len() != 15 || !(1..=12).contains(&m) || !(1..=31).contains(&d) || hm % 100 >= 60 {
        return None;
    }
    let days = days_from_civil(y as i64, m as u32, d as u32);
    Some(days as u64 * 86_400 + hm / 100 * 3600 + hm % 100 * 60)
}

/// The plan for a dataset with `schedule` whose snapshots are `existing` (short names).
pub fn plan(schedule: &Schedule, existing: &[String], now: u64) -> Plan {
    let mut out = Plan::default();
    for &(period, keep) in &schedule.keep {
        let mut mine: Vec<(u64, &String)> = existing
            .iter()
            .filter_map(|n| taken_at(n, period).map(|t| (t, n)))
            .collect();
        mine.sort();
        let due = mine.last().is_none_or(|(t, _)| *t < period.start(now));
        let name = name_at(period, now);
        let mut total = mine.len();
        if due && !existing.contains(&name) {
            out.take.push(name);
            total += 1;
        }
        let excess = total.saturating_sub(keep);
        out.destroy
            .extend(mine.iter().take(excess).map(|(_, n)| (*n).clone()));
    }
    out
}

impl crate::core::StoreCore {
    /// Takes the automatic snapshots due at `now` (one txg for all of them) and destroys
    /// those past their period's count; returns what it did, as `cairn history` lines.
    pub fn auto_snapshot_tick(&self, now: u64) -> Result<Vec<String>, StoreError> {
        let table = self.datasets();
        let mut take = Vec::new();
        let mut destroy = Vec::new();
        for ds in &table.datasets {
            let (value, _) = table.property(ds.id, SCHEDULE_PROPERTY);
            let Ok(schedule) = Schedule::parse(&value) else {
                continue; // (checked when set; an old value that no longer parses is off)
            };
            if schedule.keep.is_empty() {
                continue;
            }
            let existing: Vec<String> = table.snapshots.of(ds.id).map(|r| r.name.clone()).collect();
            let p = plan(&schedule, &existing, now);
            take.extend(p.take.iter().map(|n| format!("{}@{n}", ds.name)));
            destroy.extend(p.destroy.iter().map(|n| format!("{}@{n}", ds.name)));
        }
        let mut done = Vec::new();
        if !take.is_empty() {
            self.snapshot_create(&take, false)?;
            done.push(format!("auto-snapshot {}", take.join(" ")));
        }
        for name in destroy {
            self.snapshot_destroy(&name)?;
            done.push(format!("auto-snapshot destroy {name}"));
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-25 15:07 UTC (a Wednesday).
    const NOW: u64 = 1_795_619_220;

    #[test]
    fn dates_and_period_starts() {
        assert_eq!(days_from_civil(2026, 11, 25), (NOW / 86_400) as i64);
        assert_eq!(name_at(Period::Hourly, NOW), "auto_hourly-2026-11-25-1507");
        assert_eq!(Period::Hourly.start(NOW), NOW - 7 * 60);
        assert_eq!(Period::Frequent.start(NOW), NOW - 7 * 60);
        assert_eq!(
            Period::Weekly.start(NOW),
            NOW - 2 * 86_400 - (15 * 3600 + 7 * 60)
        );
        let month = Period::Monthly.start(NOW);
        assert_eq!(
            name_at(Period::Monthly, month),
            "auto_monthly-2026-11-01-0000"
        );
        for p in Period::ALL {
            let n = name_at(p, NOW);
            assert_eq!(taken_at(&n, p), Some(NOW - NOW % 60), "{n}");
        }
        assert_eq!(
            taken_at("auto_hourly-2026-13-25-1507", Period::Hourly),
            None
        );
        assert_eq!(taken_at("monday", Period::Hourly), None);
    }

    #[test]
    fn the_worked_example_and_retention() {
        let s = Schedule::parse("hourly=2,daily=1").unwrap();
        let existing: Vec<String> = [
            "auto_hourly-2026-11-25-1300",
            "auto_hourly-2026-11-25-1400",
            "auto_daily-2026-11-25-0000",
            "keepme",
        ]
        .map(String::from)
        .to_vec();
        let p = plan(&s, &existing, NOW);
        assert_eq!(p.take, ["auto_hourly-2026-11-25-1507"]);
        assert_eq!(p.destroy, ["auto_hourly-2026-11-25-1300"]);
        // A minute later nothing is due (the hour has its snapshot).
        let mut after = existing.clone();
        after.push("auto_hourly-2026-11-25-1507".into());
        after.retain(|n| n != "auto_hourly-2026-11-25-1300");
        assert_eq!(plan(&s, &after, NOW + 60), Plan::default());
    }

    #[test]
    fn schedules_parse_or_say_what_is_wrong() {
        assert_eq!(Schedule::parse("none").unwrap(), Schedule::default());
        for bad in [
            "hourly",
            "yearly=1",
            "hourly=0",
            "hourly=x",
            "daily=1,daily=2",
        ] {
            assert!(Schedule::parse(bad).is_err(), "{bad}");
        }
    }
}
