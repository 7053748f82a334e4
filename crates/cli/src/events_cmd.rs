//! `cairn events [-f] [-v] [-H] [-c] [POOL]`, as `zpool events`: what happened to the
//! pools of this state directory — errors, state changes, scrubs and resilvers, spares,
//! imports and exports (`cairn_pool::events`).

use std::time::Duration;

use cairn_pool::events::{self, Event};
use clap::Args;

/// How often `-f` looks for new events.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

#[derive(Args, Debug)]
pub struct EventsArgs {
    /// Follow: print new events as they come, until interrupted.
    #[arg(short = 'f')]
    follow: bool,
    /// Verbose: every detail of each event.
    #[arg(short = 'v')]
    verbose: bool,
    /// Scripted: no header, fields separated by a tab.
    #[arg(short = 'H')]
    scripted: bool,
    /// Clear: forget every event.
    #[arg(short = 'c')]
    clear: bool,
    /// Only this pool's events.
    pool: Option<String>,
}

pub fn events(a: EventsArgs) -> Result<(), String> {
    let home = crate::home();
    if a.clear {
        let n = events::read(&home).map_err(|e| e.to_string())?.len();
        events::clear(&home).map_err(|e| e.to_string())?;
        println!("cleared {n} events");
        return Ok(());
    }
    if !a.scripted {
        println!("{:<30} CLASS", "TIME");
    }
    let mut last_ns = 0;
    loop {
        let all = events::read(&home).map_err(|e| e.to_string())?;
        let since = last_ns;
        for e in all.iter().filter(|e| e.time_ns > since) {
            if a.pool.as_ref().is_none_or(|p| *p == e.pool) {
                print!("{}", render(e, &a));
            }
            last_ns = e.time_ns;
        }
        if !a.follow {
            return Ok(());
        }
        std::thread::sleep(FOLLOW_POLL);
    }
}

fn render(e: &Event, a: &EventsArgs) -> String {
    let time = crate::clock::event_time(e.time_ns);
    let mut out = if a.scripted {
        format!("{time}\t{}\n", e.class)
    } else {
        format!("{time} {}\n", e.class)
    };
    if a.verbose {
        let mut fields = vec![
            ("class", format!("\"{}\"", e.class)),
            ("pool", format!("\"{}\"", e.pool)),
            ("pool_guid", format!("0x{:x}", e.pool_guid)),
        ];
        if let Some(v) = &e.vdev {
            fields.push(("vdev_path", format!("\"{v}\"")));
        }
        for (k, v) in &e.details {
            fields.push((k.as_str(), format!("\"{v}\"")));
        }
        fields.push((
            "time",
            format!(
                "0x{:x} 0x{:x}",
                e.time_ns / 1_000_000_000,
                e.time_ns % 1_000_000_000
            ),
        ));
        for (k, v) in fields {
            out += &format!("        {k} = {v}\n");
        }
        out += "\n";
    }
    out
}
