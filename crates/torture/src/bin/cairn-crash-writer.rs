//! The crash loop's writer as a program of its own (tests use it; `cairn crashloop` runs
//! `cairn __crash-writer`, the same code).

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "cairn-crash-writer",
    about = "Appends records to a pool until killed"
)]
struct Cli {
    #[command(flatten)]
    args: cairn_torture::writer::WriterArgs,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = cairn_torture::writer::run(&cli.args) {
        eprintln!("cairn-crash-writer: {e}");
        std::process::exit(1);
    }
}
