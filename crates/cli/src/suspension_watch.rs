//! The service's side of a suspended pool (`cairn_pool::suspension`, zpool's `failmode`).
//! While devices are lost the txg sync waits for `cairn clear` inside the store, and the
//! service's main loop (which syncs) waits with it; this thread does what the loop cannot
//! meanwhile:
//! - a stop (SIGTERM, `release`) abandons the waits: the sync fails and the service ends
//!   with the error, writing nothing of the open txg (the intent log keeps what was
//!   acknowledged as durable);
//! - `failmode=panic` ends the process at once, as a crash would;
//! - the pool's events (`io_failure`) reach `cairn events`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use cairn_objset::Store;
use cairn_pool::Pool;
use cairn_vdev::FailMode;

const POLL: Duration = Duration::from_millis(50);

/// Watches until `done` is set.
pub fn spawn(
    store: Arc<Store>,
    stop: &'static AtomicBool,
    done: Arc<AtomicBool>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let pool = store.pool();
        while !done.load(Ordering::SeqCst) {
            std::thread::sleep(POLL);
            if pool.io_suspended().is_none() {
                continue;
            }
            end_if_panic(pool);
            pool.flush_events();
            if stop.load(Ordering::SeqCst) {
                pool.abandon_suspended_io();
            }
        }
    })
}

/// `failmode=panic` on a suspended pool: the process ends now, writing nothing more; the
/// next import finds the last committed txg and replays the intent log.
pub fn end_if_panic(pool: &Pool) {
    if let Some(why) = pool.io_suspended() {
        if pool.props().failmode == FailMode::Panic {
            end_at_once(pool, &why);
        }
    }
}

fn end_at_once(pool: &Pool, why: &str) -> ! {
    pool.flush_events();
    eprintln!(
        "cairn: pool '{}' cannot write ({why}) and failmode=panic: the service ends now without writing anything more; bring the devices back, then `cairn import` replays what was acknowledged",
        pool.name()
    );
    std::process::exit(1)
}
