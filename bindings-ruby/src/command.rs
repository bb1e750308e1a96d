//! The gem's `lockyard` executable (`exe/lockyard`): the `lockyard` command
//! line (the `lockyard-cli` crate, the same code as the Rust binary), run
//! without the GVL on the calling thread.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use magnus::{function, prelude::*, Error, RArray, RModule, RString, Ruby};

use crate::nogvl;

pub(crate) fn define(lockyard: RModule) -> Result<(), Error> {
    let command = lockyard.define_module("Command")?;
    command.define_singleton_method("run", function!(run, 1))
}

/// `Lockyard::Command.run(ARGV)`: runs the command line to its end and
/// returns the exit status. Arguments go through as bytes, as a shell
/// passes them (a file name need not be UTF-8).
fn run(ruby: &Ruby, args: RArray) -> Result<u8, Error> {
    let args = args
        .into_iter()
        .map(|arg| {
            let arg = RString::from_value(arg).ok_or_else(|| {
                Error::new(ruby.exception_type_error(), "arguments must be Strings")
            })?;
            // SAFETY: the bytes are copied out at once, with the GVL held.
            Ok(OsString::from_vec(unsafe { arg.as_slice() }.to_vec()))
        })
        .collect::<Result<Vec<OsString>, Error>>()?;
    // The call never ends in `Interrupted`, so it runs exactly once.
    nogvl::blocking(ruby, |_| Ok(lockyard_cli::main(args.clone())))
}
