//! `cairn history [-l] [POOL…]` and the recording of every command that changes a pool
//! (the records live in the pool: `cairn_objset::history`).
//!
//! `main` records a command after it succeeded (before, for `export` and `destroy`, while
//! the pool is still there to hold the record) by opening the pool once more: a few
//! milliseconds per command that changes a pool. When another process holds the pool at
//! that moment the record waits for it up to `RECORD_WAIT`, then is given up with a warning
//! (the command itself has succeeded).

use std::time::{Duration, Instant};

use cairn_objset::history::HistoryRecord;
use cairn_objset::Store;
use cairn_pool::{Pool, PoolError};
use clap::Args;

use crate::store_open::finish_store;

/// How long a history record waits for a pool another process holds.
const RECORD_WAIT: Duration = Duration::from_secs(3);

#[derive(Args, Debug)]
pub struct HistoryArgs {
    /// Long format: who ran each command, where, and in which txg.
    #[arg(short = 'l')]
    long: bool,
    /// Pools (default: every imported pool).
    pools: Vec<String>,
}

/// `cairn history`: each pool's records, oldest first, as `zpool history` prints them.
pub fn history(a: HistoryArgs) -> Result<(), String> {
    let home = crate::home();
    let names = if a.pools.is_empty() {
        home.pool_names().map_err(|e| e.to_string())?
    } else {
        a.pools.clone()
    };
    if names.is_empty() {
        println!("no pools available");
    }
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            println!();
        }
        let request = if a.long { "history -l" } else { "history" };
        if let Some(answer) = crate::control::ask(&home, name, request) {
            // A `cairn serve` holds the pool: it renders its history.
            match answer.strip_prefix("error: ") {
                Some(e) => return Err(e.trim().to_string()),
                None => print!("{answer}"),
            }
            continue;
        }
        let store = Store::open(Pool::open(&home, name).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        print!("{}", render_all(&store, name, a.long)?);
        // Reading changes nothing: drop the store without a sync (nothing is dirty).
        drop(store);
    }
    Ok(())
}

/// `History for 'POOL':` and one line per record.
pub fn render_all(store: &Store, name: &str, long: bool) -> Result<String, String> {
    let records = store.history().map_err(|e| e.to_string())?;
    let mut text = format!("History for '{name}':\n");
    for r in &records {
        text.push_str(&render(r, long));
        text.push('\n');
    }
    Ok(text)
}

fn render(r: &HistoryRecord, long: bool) -> String {
    let when = crate::clock::history_time(r.time);
    if long {
        format!(
            "{when} {} [user {} on {}, txg {}]",
            r.command, r.user, r.host, r.txg
        )
    } else {
        format!("{when} {}", r.command)
    }
}

/// This process's command line as history shows it: `cairn ARGS…`.
pub fn command_line() -> String {
    std::iter::once("cairn".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Records `command` in pool `name`'s history (waiting up to `RECORD_WAIT` for another
/// process that holds the pool). Failing to record is a warning, not the command's failure.
/// Writes a line into the history of a pool this process serves (the service's own work:
/// automatic snapshots, commands answered over the control socket).
pub fn record_served(store: &Store, command: &str) {
    if let Err(e) = store.log_history(command, &user_name(), &host_name()) {
        eprintln!("cairn: warning: not in the pool's history ({command}): {e}");
    }
}

pub fn record(name: &str, command: &str) {
    let home = crate::home();
    if crate::control::ask(&home, name, "list").is_some() {
        // A `cairn serve` holds the pool and answered the command itself; recording
        // through its control socket is not built yet (README: limits).
        return;
    }
    let start = Instant::now();
    let result = loop {
        match Pool::open(&home, name) {
            Err(PoolError::InUse { .. }) if start.elapsed() < RECORD_WAIT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => break Err(e.to_string()),
            Ok(pool) => break append(pool, command),
        }
    };
    if let Err(e) = result {
        eprintln!("cairn: warning: the command is not in the pool's history: {e}");
    }
}

fn append(pool: Pool, command: &str) -> Result<(), String> {
    let store = Store::open(pool).map_err(|e| e.to_string())?;
    store
        .log_history(command, &user_name(), &host_name())
        .map_err(|e| e.to_string())?;
    finish_store(store)
}

pub fn user_name() -> String {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() > 2 && f[2] == uid.to_string())
        .map(|f| f[0].to_string())
        .unwrap_or_else(|| uid.to_string())
}

pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}
