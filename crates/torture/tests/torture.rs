//! A bounded torture run: fixed seeds (every layout kind among them) plus one random seed.

use cairn_torture::torture::{print_report, run_seeds};

/// Seeds that cover mirrors, raidz1–3 and stripes of two groups.
const FIXED_SEEDS: [u64; 4] = [1, 2, 3, 4];
const STEPS: usize = 120;

#[test]
fn torture_fixed_seeds_and_one_random_seed_find_no_violation() {
    let base = tempfile::tempdir().unwrap();
    let random = cairn_torture::random_seed();
    eprintln!("torture test: random seed {random}");
    let seeds = FIXED_SEEDS.iter().copied().chain([random]);
    let report = run_seeds(seeds, STEPS, base.path(), None, true).unwrap();
    print_report(&report, false);
    assert_eq!(report.iterations, FIXED_SEEDS.len() as u64 + 1);
    assert!(report.faults_injected > 0, "{report:?}");
    assert!(
        report.violations.is_empty(),
        "violations (replay with the printed command): {:#?}",
        report.violations
    );
}
