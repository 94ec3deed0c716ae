//! Standard output, written with its errors handled rather than by
//! `println!` (which panics when the write fails).
//!
//! A reader that went away (`leasehold status | head -1`, a pager quit
//! early) ends the command quietly with success: what it wanted was read.
//! Any other write error (a full disk) is a failure that names it.

use std::fmt::Display;
use std::io::{ErrorKind, Write};

use serde::Serialize;

use crate::failure::Failure;

/// Writes `text` as is, and flushes it.
pub(crate) fn print(text: impl Display) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    write!(stdout, "{text}").and_then(|()| stdout.flush()).map_err(failure)
}

/// Writes `text` and a newline.
pub(crate) fn line(text: impl Display) -> Result<(), Failure> {
    print(format_args!("{text}\n"))
}

/// Writes `doc` as pretty-printed JSON and a newline.
pub(crate) fn json(doc: &impl Serialize) -> Result<(), Failure> {
    let json = serde_json::to_string_pretty(doc).map_err(|e| Failure::error(format!("writing JSON: {e}")))?;
    line(json)
}

fn failure(e: std::io::Error) -> Failure {
    if e.kind() == ErrorKind::BrokenPipe {
        Failure::closed()
    } else {
        Failure::error(format!("cannot write to standard output: {e}"))
    }
}
