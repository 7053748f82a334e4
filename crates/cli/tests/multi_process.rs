//! Many processes against one pool (issue 12): four workers each run random `cairn` commands
//! (put, cat, rm, dataset create/destroy, scrub, status, offline/online) at the same pool at
//! once. Every command either succeeds with the result a model predicts or is refused whole
//! ("pool 'tank' is in use by PID …"); after the run every leaf is brought back, a scrub
//! repairs nothing and finds nothing, and every acknowledged file reads back identical.
//!
//! The CI run does 4 × 100 commands. A longer run (recorded in docs/bench/torture.md):
//! `CAIRN_MP_SECONDS=1800 cargo test -p cairn --test multi_process -- --nocapture`
//! (`CAIRN_MP_BINARY=PATH` runs a copy of the binary, so rebuilding meanwhile changes nothing;
//! `CAIRN_MP_SEED=N` another seed).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::{files, ok, MIB};

const WORKERS: usize = 4;
const COMMANDS_PER_WORKER: usize = 100;
const FILES_PER_WORKER: usize = 6;
const LEAVES: usize = 4;
/// Tries of a command the pool was refused to.
const RETRIES: u64 = 8;

struct Env {
    /// The `cairn` under test (`CAIRN_MP_BINARY` for a long run on a copy of a build).
    binary: PathBuf,
    home: PathBuf,
    scratch: PathBuf,
    leaves: Vec<String>,
}

fn cairn(env: &Env, args: &[&str]) -> Output {
    Command::new(&env.binary)
        .args(args)
        .env("CAIRN_HOME", &env.home)
        .output()
        .expect("run cairn")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// What one worker believes: its files and whether its child dataset exists.
#[derive(Default)]
struct Model {
    files: BTreeMap<String, Vec<u8>>,
    child_dataset: bool,
}

#[derive(Default, Debug, Clone, Copy)]
struct Tally {
    done: usize,
    refused: usize,
}

/// A command's outcome: done, or refused because another process holds the pool.
enum Outcome {
    Done(Output),
    Refused,
}

/// Runs a command, trying again a few times while another process holds the pool (as a
/// person would); refused only when every try was.
fn run(env: &Env, args: &[&str], tally: &mut Tally) -> Outcome {
    for attempt in 0..RETRIES {
        let out = cairn(env, args);
        if out.status.success() || !stderr(&out).contains("is in use by") {
            tally.done += 1;
            return Outcome::Done(out);
        }
        std::thread::sleep(Duration::from_millis(5 + 7 * attempt));
    }
    tally.refused += 1;
    Outcome::Refused
}

fn random_bytes(rng: &mut StdRng) -> Vec<u8> {
    let len = match rng.gen_range(0..4) {
        0 => rng.gen_range(0..4096),
        1 => rng.gen_range(4096..200_000),
        _ => rng.gen_range(200_000..1_500_000),
    };
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

fn put(env: &Env, w: usize, rng: &mut StdRng, model: &mut Model, tally: &mut Tally) {
    let name = format!("tank/w{w}/f{}", rng.gen_range(0..FILES_PER_WORKER));
    let data = random_bytes(rng);
    let src = env.scratch.join(format!("src-{w}"));
    std::fs::write(&src, &data).unwrap();
    let src = src.display().to_string();
    if let Outcome::Done(out) = run(env, &["put", "-f", &src, &name], tally) {
        ok(&out);
        model.files.insert(name, data);
    }
}

fn cat(env: &Env, w: usize, rng: &mut StdRng, model: &Model, tally: &mut Tally) {
    let name = format!("tank/w{w}/f{}", rng.gen_range(0..FILES_PER_WORKER));
    if let Outcome::Done(out) = run(env, &["cat", &name], tally) {
        match model.files.get(&name) {
            Some(data) => {
                assert!(out.status.success(), "cat {name}: {}", stderr(&out));
                assert!(out.stdout == *data, "{name} reads back different");
            }
            None => assert!(
                stderr(&out).contains("no such file"),
                "cat of absent {name}: {}",
                stderr(&out)
            ),
        }
    }
}

fn rm(env: &Env, w: usize, rng: &mut StdRng, model: &mut Model, tally: &mut Tally) {
    let name = format!("tank/w{w}/f{}", rng.gen_range(0..FILES_PER_WORKER));
    if let Outcome::Done(out) = run(env, &["rm", &name], tally) {
        if model.files.remove(&name).is_some() {
            ok(&out);
        } else {
            assert!(stderr(&out).contains("no such file"), "{}", stderr(&out));
        }
    }
}

fn dataset_toggle(env: &Env, w: usize, model: &mut Model, tally: &mut Tally) {
    let name = format!("tank/w{w}/child");
    let args: &[&str] = if model.child_dataset {
        &["dataset", "destroy", "-r", &name]
    } else {
        &["dataset", "create", &name]
    };
    if let Outcome::Done(out) = run(env, args, tally) {
        ok(&out);
        model.child_dataset = !model.child_dataset;
    }
}

fn scrub_or_status(env: &Env, rng: &mut StdRng, tally: &mut Tally) {
    if rng.gen_bool(0.5) {
        if let Outcome::Done(out) = run(env, &["scrub", "tank"], tally) {
            let text = ok(&out);
            assert!(text.contains(", 0 errors"), "{text}");
        }
    } else if let Outcome::Done(out) = run(env, &["status", "tank"], tally) {
        let text = ok(&out);
        assert!(text.contains("errors: No known data errors"), "{text}");
        for bad in ["UNAVAIL", "FAULTED", "REMOVED"] {
            assert!(!text.contains(bad), "{text}");
        }
    }
}

fn offline_or_online(env: &Env, rng: &mut StdRng, tally: &mut Tally) {
    let leaf = &env.leaves[rng.gen_range(0..LEAVES)];
    let cmd = if rng.gen_bool(0.5) {
        "offline"
    } else {
        "online"
    };
    if let Outcome::Done(out) = run(env, &[cmd, "tank", leaf], tally) {
        // Taking a mirror's last readable side offline is refused with a reason.
        if !out.status.success() {
            assert!(
                cmd == "offline" && stderr(&out).contains("no valid replicas"),
                "{cmd} {leaf}: {}",
                stderr(&out)
            );
        }
    }
}

fn worker(env: &Env, w: usize, seed: u64, deadline: Option<Instant>) -> (Model, Tally) {
    let mut rng = StdRng::seed_from_u64(seed ^ (w as u64) << 32);
    let mut model = Model::default();
    let mut tally = Tally::default();
    let mut n = 0;
    while match deadline {
        Some(d) => Instant::now() < d,
        None => n < COMMANDS_PER_WORKER,
    } {
        n += 1;
        match rng.gen_range(0..100) {
            0..=29 => put(env, w, &mut rng, &mut model, &mut tally),
            30..=54 => cat(env, w, &mut rng, &model, &mut tally),
            55..=69 => rm(env, w, &mut rng, &mut model, &mut tally),
            70..=77 => dataset_toggle(env, w, &mut model, &mut tally),
            78..=91 => scrub_or_status(env, &mut rng, &mut tally),
            _ => offline_or_online(env, &mut rng, &mut tally),
        }
        // A short, random pause so the workers interleave rather than run in lockstep.
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..20)));
    }
    (model, tally)
}

fn make_pool(dir: &Path) -> Env {
    let leaves = files(dir, LEAVES, 256 * MIB);
    let env = Env {
        binary: std::env::var_os("CAIRN_MP_BINARY")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cairn"))),
        home: dir.join("home"),
        scratch: dir.to_path_buf(),
        leaves,
    };
    let l = &env.leaves;
    ok(&cairn(
        &env,
        &[
            "create", "tank", "mirror", &l[0], &l[1], "mirror", &l[2], &l[3],
        ],
    ));
    for w in 0..WORKERS {
        ok(&cairn(&env, &["dataset", "create", &format!("tank/w{w}")]));
    }
    env
}

/// After the workers: every leaf back, a clean scrub, every acknowledged file identical and
/// nothing else present.
fn check_final_state(env: &Env, models: &[Model]) {
    for leaf in &env.leaves {
        ok(&cairn(env, &["online", "tank", leaf]));
    }
    let scrub = ok(&cairn(env, &["scrub", "tank"]));
    assert!(
        scrub.contains("repaired 0B") && scrub.contains(", 0 errors"),
        "{scrub}"
    );
    let status = ok(&cairn(env, &["status", "tank"]));
    assert!(status.contains("state: ONLINE"), "{status}");
    assert!(status.contains("errors: No known data errors"), "{status}");
    for (w, model) in models.iter().enumerate() {
        for (name, data) in &model.files {
            let out = cairn(env, &["cat", name]);
            assert!(out.status.success(), "{name}: {}", stderr(&out));
            assert!(out.stdout == *data, "{name} reads back different");
        }
        let listing = ok(&cairn(env, &["ls", &format!("tank/w{w}")]));
        let mut present: Vec<String> = listing
            .lines()
            .filter_map(|l| l.split_whitespace().last())
            .filter(|n| n.starts_with('f') || n.starts_with('.'))
            .map(|n| format!("tank/w{w}/{n}"))
            .collect();
        present.sort();
        let expected: Vec<String> = model.files.keys().cloned().collect();
        assert_eq!(present, expected, "worker {w}'s directory: {listing}");
    }
}

#[test]
fn four_processes_of_random_commands_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(make_pool(dir.path()));
    let seconds: Option<u64> = std::env::var("CAIRN_MP_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok());
    let deadline = seconds.map(|s| Instant::now() + Duration::from_secs(s));
    let seed: u64 = std::env::var("CAIRN_MP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let start = Instant::now();
    let handles: Vec<_> = (0..WORKERS)
        .map(|w| {
            let env = Arc::clone(&env);
            std::thread::spawn(move || worker(&env, w, seed, deadline))
        })
        .collect();
    let results: Vec<(Model, Tally)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let (done, refused) = results
        .iter()
        .fold((0, 0), |(d, r), (_, t)| (d + t.done, r + t.refused));
    eprintln!(
        "{WORKERS} workers, seed {seed}: {} commands in {:.1} s: {done} done, {refused} refused whole (pool in use at each of {RETRIES} tries)",
        done + refused,
        start.elapsed().as_secs_f64()
    );
    assert!(done >= (done + refused) / 4, "too few commands got through");
    let models: Vec<Model> = results.into_iter().map(|(m, _)| m).collect();
    check_final_state(&env, &models);
}
