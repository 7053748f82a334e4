//! `cairn plan` without the rest of the binary: `cargo run -p cairn-plan --example plan -- --disks 24x4TB`.

use clap::Parser;

#[derive(Parser)]
#[command(name = "cairn plan")]
struct Cli {
    #[command(flatten)]
    args: cairn_plan::PlanArgs,
}

fn main() {
    let cli = Cli::parse();
    if let Err(error) = cairn_plan::run(&cli.args) {
        eprintln!("cairn: {error}");
        std::process::exit(1);
    }
}
