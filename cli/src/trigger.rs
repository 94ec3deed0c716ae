//! `leasehold trigger KEY [--json]`: make a key due now, for the whole
//! fleet, through `leasehold::LeaseStore::trigger` (one statement that also
//! wakes the listening replicas; no SQL of its own).

use leasehold::Triggered;
use serde::Serialize;

use crate::db::Db;
use crate::failure::Failure;
use crate::failure::check_name;
use crate::ops;
use crate::text;

/// Arguments of `leasehold trigger`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The lease key.
    key: String,
    /// Print the outcome as JSON (in every outcome; the exit code is the
    /// same as without --json).
    #[arg(long)]
    json: bool,
}

impl Args {
    /// Checks the key before anything is sent (or even connected).
    pub(crate) fn validate(&self) -> Result<(), Failure> {
        check_name("lease key", &self.key)
    }
}

#[derive(Serialize)]
struct TriggerJson<'a> {
    key: &'a str,
    /// `due`, `paused` (due, runs once resumed) or `not-found`.
    outcome: &'static str,
    /// Whether the key is paused (by its own name or its job).
    paused: bool,
}

pub(crate) async fn run(db: &Db, args: &Args) -> Result<(), Failure> {
    args.validate()?;
    db.require_schema().await?;
    // Through `Operator`, so the key's history records who triggered it.
    let operator = ops::operator(db)?;
    let outcome = operator.trigger(&args.key).await.map_err(|e| db.failure(e))?;
    let key = text::cell(&format!("{:?}", args.key));
    let (name, paused) = match outcome {
        Triggered::Due => ("due", false),
        Triggered::Paused => ("paused", true),
        Triggered::NotFound => ("not-found", false),
        // An outcome of a newer library that this CLI does not know.
        other => {
            return Err(Failure::error(format!(
                "trigger {key}: the library answered {other:?}, which this CLI does not know: upgrade \
                 leasehold-cli (see `leasehold status` for the key's row)"
            )));
        }
    };
    if args.json {
        let doc = TriggerJson {
            key: &args.key,
            outcome: name,
            paused,
        };
        let json = serde_json::to_string_pretty(&doc).map_err(|e| Failure::error(format!("writing JSON: {e}")))?;
        println!("{json}");
    }
    match outcome {
        Triggered::NotFound => Err(Failure::not_found(format!(
            "no lease with key {key} in {} (no replica registered it; see `leasehold status`); nothing to trigger",
            db.name
        ))),
        Triggered::Paused => {
            if !args.json {
                println!(
                    "{key} is due now but paused (by its own pause or its job's): it runs once resumed (see `leasehold status`)"
                );
            }
            Ok(())
        }
        _ => {
            if !args.json {
                println!("{key} is due now: the first replica that claims it runs it");
            }
            Ok(())
        }
    }
}
