//! `modelcas`: the command-line interface. Parses arguments, opens the store and hands
//! over to one module per subcommand in `cmd/`; all the work is done by the `store` crate.

mod args;
mod cmd;
mod output;
mod progress;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    match cmd::run(cli) {
        Ok(code) => code,
        Err(e) => {
            if let Some(ioe) = e.downcast_ref::<std::io::Error>() {
                if ioe.kind() == std::io::ErrorKind::BrokenPipe {
                    return ExitCode::SUCCESS;
                }
            }
            eprintln!("modelcas: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
