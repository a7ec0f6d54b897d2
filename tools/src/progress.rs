//! Progress indication on stderr for anything that waits: a spinner with a
//! label when stderr is a terminal, nothing otherwise (scripts and logs get
//! clean output).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

const FRAMES: [char; 4] = ['|', '/', '-', '\\'];

/// A spinner; call [`Spinner::tick`] while waiting and [`Spinner::done`] at the end.
#[derive(Debug)]
pub struct Spinner {
    label: String,
    tty: bool,
    frame: usize,
    last: Option<Instant>,
}

impl Spinner {
    /// A spinner showing `label`.
    pub fn new(label: impl Into<String>) -> Spinner {
        Spinner {
            label: label.into(),
            tty: std::io::stderr().is_terminal(),
            frame: 0,
            last: None,
        }
    }

    /// Advances the spinner (at most every 100 ms).
    pub fn tick(&mut self) {
        if !self.tty
            || self
                .last
                .is_some_and(|t| t.elapsed() < Duration::from_millis(100))
        {
            return;
        }
        self.last = Some(Instant::now());
        self.frame = (self.frame + 1) % FRAMES.len();
        let mut err = std::io::stderr().lock();
        // Progress output is best effort: a closed stderr must not fail the command.
        if write!(err, "\r{} {}", FRAMES[self.frame], self.label)
            .and_then(|()| err.flush())
            .is_err()
        {
            self.tty = false;
        }
    }

    /// Clears the spinner line.
    pub fn done(&mut self) {
        if self.tty && self.last.is_some() {
            let mut err = std::io::stderr().lock();
            if write!(err, "\r{}\r", " ".repeat(self.label.len() + 2))
                .and_then(|()| err.flush())
                .is_err()
            {
                self.tty = false;
            }
        }
        self.last = None;
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.done();
    }
}
