//! The bench lab: programs that measure and print figures (and JSON), never timed
//! assertions. `cairn bench parity` measures the RAID-Z parity kernels against ISA-L.

pub mod parity;

pub use parity::ParityBenchArgs;

/// `cairn bench …` subcommands.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum BenchCommand {
    /// Parity kernel throughput (GB/s of data, single thread), against ISA-L when installed.
    Parity(ParityBenchArgs),
}

/// Runs a benchmark, printing to stdout.
pub fn run(cmd: &BenchCommand) -> Result<(), Box<dyn std::error::Error>> {
    match cmd {
        BenchCommand::Parity(args) => parity::run(args),
    }
}
