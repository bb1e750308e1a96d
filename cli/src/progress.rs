//! The line on stderr while `lockyard` waits: who holds the name and for
//! how long. Redrawn in place on a terminal; a line every few seconds in a
//! CI log.

use crate::output::{say, say_part};
use std::io::IsTerminal;
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// No line at all for a wait shorter than this: an uncontended lock, or
/// a handover, says nothing.
const QUIET_START: Duration = Duration::from_millis(300);
const TERMINAL_EVERY: Duration = Duration::from_secs(1);
const LOG_EVERY: Duration = Duration::from_secs(5);

pub struct Progress {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl Progress {
    pub fn start(name: String, describe: Box<dyn Fn() -> Option<String> + Send>) -> Progress {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = thread::spawn(move || {
            let terminal = std::io::stderr().is_terminal();
            let started = Instant::now();
            let mut pause = QUIET_START;
            let mut drawn = false;
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(pause) {
                let who = describe().unwrap_or_else(|| "held by another".to_owned());
                let line = format!(
                    "lockyard: waiting {}s for {name:?}: {who}",
                    started.elapsed().as_secs()
                );
                if terminal {
                    say_part!("\r\x1b[2K{line}");
                    drawn = true;
                    pause = TERMINAL_EVERY;
                } else {
                    say!("{line}");
                    pause = LOG_EVERY;
                }
            }
            if drawn {
                say_part!("\r\x1b[2K");
            }
        });
        Progress { stop, thread }
    }

    /// Ends the line before COMMAND's output starts.
    pub fn stop(self) {
        drop(self.stop);
        let _ = self.thread.join();
    }
}
