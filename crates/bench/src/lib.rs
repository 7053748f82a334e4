//! The bench lab. (skeleton; the parity issue fills in `bench parity`)

/// `cairn bench …` subcommands.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum BenchCommand {
    /// Parity kernel throughput (GB/s of data, single thread).
    Parity,
}

/// Runs a benchmark, printing to stdout.
pub fn run(_cmd: &BenchCommand) -> Result<(), Box<dyn std::error::Error>> {
    Err("not implemented yet".into())
}
