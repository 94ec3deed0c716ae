//! `leasehold history KEY [--limit N] [--json]`: the recorded runs of a key,
//! newest first.
//!
//! Through `leasehold::store::Records::history` (the ring of each key's latest
//! runs, written by each run's release) and `LeaseStore::get` (the server
//! clock, and whether the key has a lease row); no SQL of its own.

use chrono::{DateTime, Utc};
use leasehold::Key;
use leasehold::store::{LeaseStore, RunRecord};
use serde::Serialize;

use crate::db::Db;
use crate::failure::Failure;
use crate::failure::KeyArg;
use crate::out;
use crate::runs::{EARLIER_LIFE, RunJson, outcome_text};
use crate::text::{self, Align};

/// Most runs one `history` call returns (the library's limit).
const MAX_LIMIT: u64 = 10_000;

/// Widest `ERROR` cell when the terminal's width is unknown.
const ERROR_CHARS: usize = 60;

/// Arguments of `leasehold history`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The lease key.
    #[arg(value_parser = KeyArg)]
    key: Key,
    /// Show at most N runs, the latest (1 to 10000).
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=MAX_LIMIT))]
    limit: u64,
    /// Print JSON instead of a table (errors in full).
    #[arg(long)]
    json: bool,
}

impl Args {
    /// Checks the key before anything is sent (or even connected).
    pub(crate) fn validate(&self) -> Result<(), Failure> {
        if !(1..=MAX_LIMIT).contains(&self.limit) {
            return Err(Failure::usage(format!(
                "--limit {}: ask for 1 to {MAX_LIMIT} runs",
                self.limit
            )));
        }
        Ok(())
    }
}

#[derive(Serialize)]
struct HistoryJson<'a> {
    key: &'a str,
    server_now: DateTime<Utc>,
    /// Newest first.
    runs: Vec<RunJson<'a>>,
}

pub(crate) async fn run(db: &Db, args: &Args) -> Result<(), Failure> {
    db.require_schema().await?;
    let store = LeaseStore::new(db.pool.clone());
    let limit = usize::try_from(args.limit).unwrap_or(usize::MAX);
    let runs = store
        .records()
        .history(&args.key, limit)
        .await
        .map_err(|e| db.failure(e))?;
    let info = store.get(&args.key).await.map_err(|e| db.failure(e))?;
    let server_now = match &info {
        Some(info) => info.server_now,
        None => db.server_now().await?,
    };
    if args.json {
        let doc = HistoryJson {
            key: &args.key,
            server_now,
            runs: runs.iter().map(RunJson::from).collect(),
        };
        out::json(&doc)?;
    }
    let key = text::cell(&format!("{:?}", args.key));
    if runs.is_empty() {
        if info.is_none() {
            return Err(Failure::not_found(format!(
                "no lease with key {key} in {} and no runs recorded for it (see `leasehold status`)",
                db.name
            )));
        }
        if !args.json {
            out::line(format_args!("no runs recorded for {key}"))?;
        }
        return Ok(());
    }
    if !args.json {
        out::print(format_args!(
            "{}",
            render(&key, &runs, args.limit, server_now, text::terminal_width())
        ))?;
    }
    Ok(())
}

fn render(key: &str, runs: &[RunRecord], limit: u64, server_now: DateTime<Utc>, width: Option<usize>) -> String {
    let job = match runs.first().and_then(|r| r.job_name.as_deref()) {
        Some(job) => format!(" (job {})", text::cell(job)),
        None => String::new(),
    };
    let count = if runs.len() as u64 >= limit {
        format!(
            "the latest {} (--limit {limit})",
            text::plural(runs.len() as u64, "run")
        )
    } else {
        format!("{} recorded", text::plural(runs.len() as u64, "run"))
    };
    let mut out = format!(
        "history of {key}{job}: {count}, newest first; server time {}\n\n",
        text::time(server_now)
    );
    let header = [
        ("RUN", Align::Right),
        ("FENCE", Align::Right),
        ("HOLDER", Align::Left),
        ("SLOT", Align::Left),
        ("STARTED", Align::Left),
        ("DURATION", Align::Left),
        ("OUTCOME", Align::Left),
        ("ERROR", Align::Left),
    ];
    let cells: Vec<Vec<String>> = runs
        .iter()
        .map(|run| {
            vec![
                run.run_no.to_string(),
                run.fence.to_string(),
                text::cell(&run.holder),
                run.scheduled_for.map_or_else(|| "-".to_owned(), text::time),
                format!(
                    "{} ({})",
                    text::time(run.started_at),
                    text::relative(text::secs(run.started_at - server_now))
                ),
                text::span(run.duration().as_secs_f64()),
                outcome_text(run),
                run.error.as_deref().map(text::one_line).unwrap_or_default(),
            ]
        })
        .collect();
    out.push_str(&text::table_fitted(&header, cells, width, ERROR_CHARS));
    if runs.iter().any(|run| run.earlier_life) {
        out.push_str(&format!(
            "runs marked \"{EARLIER_LIFE}\" ran before the key (of a job kind) was removed, or removed and added \
             again: with that life's arguments and schedule\n"
        ));
    }
    out
}
