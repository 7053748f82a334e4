//! The bench lab: programs that measure and print figures (and JSON), never timed
//! assertions. `cairn bench parity` measures the RAID-Z parity kernels against ISA-L.

pub mod io;
pub mod parity;
pub mod real_dd;
pub mod real_mirror;
pub mod send;
pub mod snapshots;
pub mod sync_writes;

pub use io::IoBenchArgs;
pub use parity::ParityBenchArgs;
pub use send::SendBenchArgs;
pub use snapshots::SnapshotBenchArgs;
pub use sync_writes::SyncWritesBenchArgs;

/// `cairn bench …` subcommands.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum BenchCommand {
    /// Parity kernel throughput (GB/s of data, single thread), against ISA-L when installed.
    Parity(ParityBenchArgs),
    /// Sequential write/read of a large file through the whole stack on tmpfs leaves, per
    /// layout, side by side with zfs-fuse when it is installed.
    Io(IoBenchArgs),
    /// Snapshot create and destroy times as the dataset grows (1 GiB, 64 GiB), side by
    /// side with zfs-fuse when it is installed.
    Snapshot(SnapshotBenchArgs),
    /// `send` and `receive` throughput on tmpfs leaves, and what an incremental reads.
    Send(SendBenchArgs),
    /// Synchronous 4 KiB random writes over NBD (each with FUA, or followed by FLUSH), one
    /// at a time, against any NBD servers given by URI.
    SyncWrites(SyncWritesBenchArgs),
}

/// Runs a benchmark, printing to stdout.
pub fn run(cmd: &BenchCommand) -> Result<(), Box<dyn std::error::Error>> {
    match cmd {
        BenchCommand::Parity(args) => parity::run(args),
        BenchCommand::Io(args) => io::run(args),
        BenchCommand::Snapshot(args) => snapshots::run(args),
        BenchCommand::Send(args) => send::run(args),
        BenchCommand::SyncWrites(args) => sync_writes::run(args),
    }
}
