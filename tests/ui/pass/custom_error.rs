//! `run` may return any error type that converts into `JobError`.
use std::fmt;

use leasehold::{FenceGuard, FencedJob};

#[derive(Debug)]
struct ReportError {
    rows: usize,
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} rows failed", self.rows)
    }
}

impl std::error::Error for ReportError {}

#[derive(FencedJob)]
#[job(every = "1h")]
struct Report;

impl Report {
    async fn run(&self, _guard: FenceGuard) -> Result<(), ReportError> {
        Err(ReportError { rows: 3 })
    }
}

/// `String` converts too.
#[derive(FencedJob)]
struct Stringly;

impl Stringly {
    async fn run(&self, _guard: FenceGuard) -> Result<(), String> {
        Err("nope".to_owned())
    }
}

/// A plain `fn` returning a `Send` future works as well as an `async fn`.
#[derive(FencedJob)]
struct NotAsync;

impl NotAsync {
    fn run(&self, _guard: FenceGuard) -> impl Future<Output = Result<(), std::io::Error>> + Send {
        std::future::ready(Ok(()))
    }
}

fn assert_job<J: FencedJob>(_: &J) {}

fn main() {
    assert_job(&Report);
    assert_job(&Stringly);
    assert_job(&NotAsync);
    assert_eq!(Report.name(), "report");
    assert_eq!(NotAsync.name(), "not_async");
}
