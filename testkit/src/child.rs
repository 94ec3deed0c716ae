//! What a child process the tests start (PgBouncer, chromedriver) wrote to
//! stderr, kept in a file: a child that exits or never listens is reported
//! with its own words, not only with a timeout.

use std::fs::File;
use std::path::Path;
use std::process::Stdio;

/// A new file at `path` to take a child's stderr (`Command::stderr`).
/// Panics when the file cannot be created: the test could not report the
/// child's failure otherwise.
pub fn stderr_file(path: &Path) -> Stdio {
    File::create(path)
        .map(Stdio::from)
        .unwrap_or_else(|e| panic!("creating {} for a child's stderr: {e}", path.display()))
}

/// The last `lines` lines of the file at `path`, for a failure message;
/// says so when it is empty or cannot be read.
pub fn tail(path: &Path, lines: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim().is_empty() => format!("({} is empty)", path.display()),
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}
