//! `cairn bench parity` without the `cairn` binary (handy while other crates are in flux):
//! `cargo run --release -p cairn-bench --example parity -- --quick`.

use clap::Parser;

#[derive(Parser)]
#[command(name = "parity", about = "Same options as `cairn bench parity`")]
struct Cli {
    #[command(flatten)]
    args: cairn_bench::ParityBenchArgs,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = cairn_bench::run(&cairn_bench::BenchCommand::Parity(cli.args)) {
        eprintln!("parity bench: {e}");
        std::process::exit(1);
    }
}
