//! The `cairn` binary: a thin clap front end over the library crates.

use clap::{Parser, Subcommand};

/// cairn: ZFS-style RAID-Z, mirrors and stripes in user space.
#[derive(Parser, Debug)]
#[command(name = "cairn", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Plan a pool: capacity, data-loss risk, speed and rebuild time of every layout.
    Plan(cairn_plan::PlanArgs),
    /// Benchmarks (parity kernels, …).
    #[command(subcommand)]
    Bench(cairn_bench::BenchCommand),
}

fn main() {
    let cli = Cli::parse();
    let result: Result<(), String> = match &cli.command {
        Command::Plan(args) => cairn_plan::run(args).map_err(|e| e.to_string()),
        Command::Bench(cmd) => cairn_bench::run(cmd).map_err(|e| e.to_string()),
    };
    if let Err(msg) = result {
        eprintln!("cairn: {msg}");
        std::process::exit(1);
    }
}
