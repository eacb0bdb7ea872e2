//! viabench: openvia's measuring instrument.
//!
//! Latency (ping-pong) and bandwidth (windowed stream) over any registered
//! transport — openvia's own and kernel TCP/UDP as references — measured by
//! the same drivers, with the same pinning and wait modes, reported as
//! tables or JSON lines. See crates/bench/README.md for the method.

mod cli;
mod commands;
mod compare;
mod driver_bandwidth;
mod driver_latency;
mod error;
mod line;
mod measure;
mod overhead;
mod pattern;
mod peer;
mod pinning;
mod report;
mod scale;
mod serve;
mod session;
mod stats;
mod transports;

use clap::Parser;
use cli::{Cli, Command};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Returning (not exiting) lets destructors reap any server we started.
    let result = match &cli.command {
        Command::Latency(args) => commands::latency(args),
        Command::Bandwidth(args) => commands::bandwidth(args),
        Command::Serve(args) => serve::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Transports(args) => commands::list_transports(args),
        Command::Overhead(args) => overhead::run(args),
        Command::Scale(args) => scale::run(args),
        Command::Line(args) => line::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let who = if matches!(cli.command, Command::Serve(_)) {
                "viabench serve"
            } else {
                "viabench"
            };
            eprintln!("{who}: error: {e}");
            ExitCode::FAILURE
        }
    }
}
