//! `leasehold revoke KEY [--force]`: end the current tenure of a lease.
//!
//! The library's `Operator::revoke` does it (and records it in the key's
//! history), in one statement with the row locked: the row takes a fresh
//! fence (and, if held, expires now), so the old holder's renewal finds no
//! row and cancels its run; and the fence rows of the key and of every
//! `--resource` rise to the new fence, so the old run's next
//! `begin_fenced` is rejected at once. This file only parses and presents:
//! the outcome is said in the library's words, as the history has it.
//!
//! A lease that is free (expired or released) needs no `--force`: nobody is
//! running under it, but a paused ex-holder may still wake up and write, and
//! this fences it out. A held lease needs `--force`.

use leasehold::Key;
use leasehold::operator::{OperatorAction, Revoke, Revoked, Target};
use serde::Serialize;

use crate::db::Db;
use crate::failure::{Failure, KeyArg, check_name};
use crate::ops::{self, LeaseJson, Row, said};
use crate::out;

/// Arguments of `leasehold revoke`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The lease key.
    #[arg(value_parser = KeyArg)]
    key: Key,
    /// Revoke even though the lease is held: the holder's run is cancelled
    /// at its next heartbeat and its fenced writes are rejected.
    #[arg(long)]
    force: bool,
    /// Also raise this fenced resource (a `begin_fenced_on` resource of this
    /// job) to the new fence. The key itself is always raised. Repeatable.
    /// Name only resources that belong to this key.
    #[arg(long = "resource", value_name = "R")]
    resources: Vec<String>,
    /// Print the outcome as JSON on standard output (in every outcome; the
    /// exit code is the same as without --json).
    #[arg(long)]
    json: bool,
}

/// `--json` output.
#[derive(Serialize)]
struct RevokeJson<'a> {
    key: &'a str,
    /// `ended`, `held` (without --force: nothing changed) or `not-found`.
    outcome: &'static str,
    force: bool,
    /// The row's new fence, for `ended`: fenced writes below it are
    /// rejected on `resources`.
    #[serde(skip_serializing_if = "Option::is_none")]
    fence: Option<i64>,
    /// The fenced resources raised to `fence` (the key first), for `ended`.
    #[serde(skip_serializing_if = "Option::is_none")]
    resources: Option<Vec<&'a str>>,
    /// The lease as it was before (`ended`) or as it was kept (`held`),
    /// with the fields of `status --json`.
    #[serde(skip_serializing_if = "Option::is_none")]
    lease: Option<LeaseJson<'a>>,
}

impl Args {
    /// Checks the names before anything is sent (or even connected).
    pub(crate) fn validate(&self) -> Result<(), Failure> {
        for resource in &self.resources {
            check_name("fenced resource", resource)?;
        }
        Ok(())
    }
}

pub(crate) async fn run(db: &Db, args: &Args) -> Result<(), Failure> {
    let (revoke, action) = if args.force {
        (Revoke::Force, OperatorAction::ForceRevoke)
    } else {
        (Revoke::IfFree, OperatorAction::Revoke)
    };
    let resources: Vec<&str> = args.resources.iter().map(String::as_str).collect();
    let outcome = ops::operator(db)?
        .revoke(&args.key, revoke, &resources)
        .await
        .map_err(|e| db.failure(e))?;
    let line = said(action, &Target::from(args.key.clone()), &outcome);
    match outcome {
        Revoked::Ended { fence, previous } => {
            let mut raised = vec![args.key.as_str()];
            for resource in &resources {
                if !raised.contains(resource) {
                    raised.push(resource);
                }
            }
            if args.json {
                return print_json(args, "ended", Some(fence), Some(raised), Some(&Row(previous)));
            }
            let names: Vec<String> = raised.iter().map(|r| format!("{r:?}")).collect();
            out::line(&line)?;
            out::line(format_args!(
                "  begin_fenced on {} now rejects every fence below {fence} (StaleFence)",
                crate::text::cell(&names.join(", "))
            ))?;
            Ok(())
        }
        Revoked::Held(info) => {
            let row = Row(info);
            if args.json {
                print_json(args, "held", None, None, Some(&row))?;
            }
            Err(Failure::refused(format!(
                "{line}; nothing changed. Pass --force to end this tenure: the holder's run is cancelled at its \
                 next heartbeat and its fenced writes are rejected"
            )))
        }
        Revoked::NotFound => {
            if args.json {
                print_json(args, "not-found", None, None, None)?;
            }
            Err(Failure::not_found(format!(
                "{line} in {} (see `leasehold status`)",
                db.name
            )))
        }
        // An outcome of a newer library that this CLI does not know.
        other => Err(Failure::error(format!(
            "{line}: the library answered {other:?}, which this CLI does not know: upgrade leasehold-cli (see \
             `leasehold status` for the key's row)"
        ))),
    }
}

fn print_json(
    args: &Args,
    outcome: &'static str,
    fence: Option<i64>,
    resources: Option<Vec<&str>>,
    row: Option<&Row>,
) -> Result<(), Failure> {
    out::json(&RevokeJson {
        key: &args.key,
        outcome,
        force: args.force,
        fence,
        resources,
        lease: row.map(Row::json),
    })
}
