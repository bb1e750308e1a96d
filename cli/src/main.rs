//! The `lockyard` command as its own binary (`cargo install lockyard-cli`).

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(lockyard_cli::main(std::env::args_os().skip(1)))
}
