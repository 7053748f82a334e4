//! Data-loss risk: MTTDL with serial repair and unrecoverable read errors during rebuild.
//!
//! Model (the classic RAID reliability model of Patterson, Gibson & Katz, "A Case for
//! Redundant Arrays of Inexpensive Disks", 1988, generalised to k-failure tolerance as in
//! Gibson's thesis and the SNIA/NetApp double-parity papers):
//! - disks fail independently at rate λ = 1/MTBF, with MTBF = 8760 h / AFR;
//! - **repair is serial**: one failed disk is rebuilt at a time, at rate μ = 1/MTTR,
//!   whatever the number of failed disks (this is how ZFS resilvers a group by default
//!   and how the closed formula below is derived);
//! - a group of n disks that tolerates k failures loses data when a (k+1)-th disk fails
//!   while k are down: `MTTDL = MTBF^(k+1) / (n!/(n−k−1)! · MTTR^k)` (valid for MTTR ≪ MTBF;
//!   [`mttdl_markov_hours`] solves the exact chain);
//! - it also loses data when, with k disks already down, the rebuild reads an
//!   unrecoverable sector from one of the n−k survivors: `P(URE) = 1 − (1 − BER)^bits`;
//! - groups are independent, so the pool's loss rate is the sum of its groups' rates, and
//!   `P(loss within t) = 1 − exp(−t / MTTDL)`.

/// Hours in a year (AFR ↔ MTBF conversion).
pub const HOURS_PER_YEAR: f64 = 8760.0;

/// MTBF in hours from an annualised failure rate (fraction per year).
pub fn mtbf_hours_from_afr(afr: f64) -> f64 {
    HOURS_PER_YEAR / afr
}

/// Annualised failure rate from observed failures over drive-hours (e.g. Backblaze).
pub fn afr_from_failures(failures: f64, drive_hours: f64) -> f64 {
    failures * HOURS_PER_YEAR / drive_hours
}

/// Probability of at least one unrecoverable read error reading `bytes` at `ber` errors/bit.
pub fn p_unrecoverable_read(bytes: f64, ber: f64) -> f64 {
    let bits = bytes * 8.0;
    // 1 − (1−ber)^bits, computed without cancellation.
    -(bits * (-ber).ln_1p()).exp_m1()
}

/// n·(n−1)·…·(n−count+1).
fn falling_factorial(n: usize, count: usize) -> f64 {
    (0..count).map(|i| n.saturating_sub(i) as f64).product()
}

/// Closed-form MTTDL of one group of `disks` tolerating `tolerates` failures:
/// `MTBF^(k+1) / (n!/(n−k−1)! · MTTR^k)`.
pub fn mttdl_hours(disks: usize, tolerates: usize, mtbf: f64, mttr: f64) -> f64 {
    1.0 / group_loss_rate(disks, tolerates, mtbf, mttr, 0.0)
}

/// Loss rate (per hour) of one group, including unrecoverable read errors during the last
/// rebuild: rate of reaching the k-down state × P(URE), plus rate of a (k+1)-th failure.
pub fn group_loss_rate(disks: usize, tolerates: usize, mtbf: f64, mttr: f64, p_ure: f64) -> f64 {
    let k = tolerates as i32;
    let failure_rate = falling_factorial(disks, tolerates + 1) * mttr.powi(k) / mtbf.powi(k + 1);
    if tolerates == 0 {
        return failure_rate;
    }
    let reach_last_redundancy =
        falling_factorial(disks, tolerates) * mttr.powi(k - 1) / mtbf.powi(k);
    failure_rate + reach_last_redundancy * p_ure
}

/// Exact MTTDL of the Markov chain with states 0..=k failed disks, failure rate (n−i)/MTBF
/// from state i and serial repair at rate 1/MTTR from every degraded state.
///
/// Solved by the standard first-step recursion on `T_i` = expected time to go from state i
/// to state i+1: `T_0 = 1/λ_0`, `T_i = (1 + μ·T_{i−1}) / λ_i`; MTTDL = Σ T_i.
pub fn mttdl_markov_hours(disks: usize, tolerates: usize, mtbf: f64, mttr: f64) -> f64 {
    let repair = 1.0 / mttr;
    let mut step = 0.0;
    let mut total = 0.0;
    for failed in 0..=tolerates {
        let failure = disks.saturating_sub(failed) as f64 / mtbf;
        step = if failed == 0 {
            1.0 / failure
        } else {
            (1.0 + repair * step) / failure
        };
        total += step;
    }
    total
}

/// Probability that data is lost within `hours` at a constant loss rate.
pub fn p_loss_within(loss_rate_per_hour: f64, hours: f64) -> f64 {
    -(-loss_rate_per_hour * hours).exp_m1()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(actual: f64, expected: f64, relative: f64) -> bool {
        ((actual - expected) / expected).abs() <= relative
    }

    #[test]
    fn unrecoverable_read_probabilities() {
        // "Why RAID 5 stops working in 2009" style figures.
        assert!(close(p_unrecoverable_read(6e12, 1e-14), 0.38, 0.01));
        assert!(close(p_unrecoverable_read(6e12, 1e-15), 0.047, 0.01));
        assert!(close(p_unrecoverable_read(3e12, 1e-14), 0.21, 0.02));
        assert!(close(p_unrecoverable_read(3e12, 1e-15), 0.024, 0.02));
        assert_eq!(p_unrecoverable_read(0.0, 1e-14), 0.0);
    }

    #[test]
    fn mirror_mttdl() {
        let mttdl = mttdl_hours(2, 1, 6_000_000.0, 120.0);
        assert!(close(mttdl, 1.5e11, 1e-9));
    }

    #[test]
    fn afr_from_observed_failures() {
        assert!(close(afr_from_failures(5.0, 750_000.0), 0.0584, 0.001));
        assert!(close(mtbf_hours_from_afr(0.0073), 1.2e6, 0.001));
    }

    #[test]
    fn closed_form_agrees_with_markov_chain() {
        let formula = mttdl_hours(6, 2, 1.2e6, 10.0);
        assert!(close(formula, 1.44e14, 1e-9));
        assert!(close(mttdl_markov_hours(6, 2, 1.2e6, 10.0), formula, 0.001));
        for (disks, tolerates) in [(2, 1), (3, 2), (12, 1), (24, 2), (24, 3), (8, 0)] {
            let exact = mttdl_markov_hours(disks, tolerates, 500_000.0, 48.0);
            let approx = mttdl_hours(disks, tolerates, 500_000.0, 48.0);
            assert!(
                close(approx, exact, 0.01),
                "{disks}/{tolerates}: {approx} vs {exact}"
            );
        }
    }

    #[test]
    fn unrecoverable_reads_shorten_mttdl() {
        let without = group_loss_rate(6, 1, 1e6, 24.0, 0.0);
        let with = group_loss_rate(6, 1, 1e6, 24.0, 0.2);
        // 6 disks reach one-down at 6/MTBF; a fifth of those rebuilds fail.
        assert!(close(with - without, 6.0 / 1e6 * 0.2, 1e-9));
        assert!(close(
            p_loss_within(1e-5, 8760.0),
            1.0 - (-0.0876f64).exp(),
            1e-12
        ));
    }
}
