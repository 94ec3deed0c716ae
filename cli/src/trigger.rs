//! `leasehold trigger KEY [--json]`: make a key due now, for the whole
//! fleet, through `leasehold::operator::Operator::trigger` (one statement that also
//! wakes the listening replicas, recorded in the key's history; no SQL of
//! its own). The outcome is said in the library's words.

use leasehold::Key;
use leasehold::operator::{OperatorAction, Target, Triggered};
use serde::Serialize;

use crate::db::Db;
use crate::failure::Failure;
use crate::failure::KeyArg;
use crate::ops::{self, said};
use crate::out;

/// Arguments of `leasehold trigger`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The lease key.
    #[arg(value_parser = KeyArg)]
    key: Key,
    /// Print the outcome as JSON (in every outcome; the exit code is the
    /// same as without --json).
    #[arg(long)]
    json: bool,
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
    // Through `Operator`, so the key's history records who triggered it.
    let operator = ops::operator(db)?;
    let outcome = operator.trigger(&args.key).await.map_err(|e| db.failure(e))?;
    let line = said(OperatorAction::Trigger, &Target::from(args.key.clone()), outcome);
    let (name, paused) = match outcome {
        Triggered::Due => ("due", false),
        Triggered::Paused => ("paused", true),
        Triggered::NotFound => ("not-found", false),
        // An outcome of a newer library that this CLI does not know.
        other => {
            return Err(Failure::error(format!(
                "{line}: the library answered {other:?}, which this CLI does not know: upgrade leasehold-cli \
                 (see `leasehold status` for the key's row)"
            )));
        }
    };
    if args.json {
        let doc = TriggerJson {
            key: &args.key,
            outcome: name,
            paused,
        };
        out::json(&doc)?;
    }
    if outcome == Triggered::NotFound {
        return Err(Failure::not_found(format!(
            "{line} in {} (see `leasehold status`); nothing to trigger",
            db.name
        )));
    }
    if !args.json {
        out::line(&line)?;
    }
    Ok(())
}
