//! Writing to stdout and stderr without panicking. `println!` panics when
//! the reader is gone (`lockyard status | head -c0`, a CI log pipe closed
//! early), and a panic on the way to stopping COMMAND would skip its
//! SIGTERM and grace: what cannot be written is dropped instead.

/// `println!` that drops what cannot be written.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `print!` that drops what cannot be written.
macro_rules! out_part {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut stdout = std::io::stdout();
        let _ = write!(stdout, $($arg)*);
        let _ = stdout.flush();
    }};
}

/// `eprintln!` that drops what cannot be written.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `eprint!` that drops what cannot be written.
macro_rules! say_part {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

pub(crate) use {out, out_part, say, say_part};
