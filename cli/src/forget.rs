//! `leasehold forget KEY [--json]`: delete the lease row of a key that no
//! replica registers any more (a removed tenant, a renamed job).
//!
//! All through `leasehold::operator::Operator::forget` (recorded in the key's
//! history, whose words the CLI prints; `Controls::forget` is one
//! statement): the row is
//! deleted only if its lease is free by the server clock, so a run in
//! progress keeps its lease and no other replica can claim the key under
//! it. What goes is the key's schedule and last holder; nothing else:
//!
//! - a replica that still registers the key creates the row again, due at
//!   its next slot (so forget a key after the replicas stop registering it);
//! - fences keep growing: they come from `leasehold_fence_seq`, not from the
//!   row, so a re-created key's next run still gets a fence above every
//!   fence of its forgotten past;
//! - `leasehold_fence` rows (fenced resources) are left alone: they only
//!   reject fences lower than any the sequence hands out from now on.

use leasehold::Key;
use leasehold::operator::{Forgotten, OperatorAction, Target};
use serde::Serialize;

use crate::db::Db;
use crate::failure::Failure;
use crate::failure::KeyArg;
use crate::ops::{self, LeaseJson, Row, said};
use crate::out;
use crate::text;

/// Arguments of `leasehold forget`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The lease key.
    #[arg(value_parser = KeyArg)]
    key: Key,
    /// Print the outcome as JSON on standard output (in every outcome; the
    /// exit code is the same as without --json).
    #[arg(long)]
    json: bool,
}

/// `--json` output.
#[derive(Serialize)]
struct ForgetJson<'a> {
    key: &'a str,
    /// `deleted`, `not-found`, or `held` (nothing was deleted).
    outcome: &'static str,
    /// The lease that was kept, for `held`; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    lease: Option<LeaseJson<'a>>,
}

pub(crate) async fn run(db: &Db, args: &Args) -> Result<(), Failure> {
    // Through `Operator`, so the key's history records who forgot it.
    let outcome = ops::operator(db)?.forget(&args.key).await.map_err(|e| db.failure(e))?;
    let line = said(OperatorAction::Forget, &Target::from(args.key.clone()), &outcome);
    match outcome {
        Forgotten::Deleted => {
            if args.json {
                print_json(&args.key, "deleted", None)?;
            } else {
                out::line(&line)?;
                out::line(format_args!(
                    "  a replica that still registers it creates it again, due at its next slot;"
                ))?;
                out::line(format_args!(
                    "  its fences stay above every fence handed out so far (they come from a sequence)"
                ))?;
            }
            Ok(())
        }
        Forgotten::NotFound => {
            if args.json {
                print_json(&args.key, "not-found", None)?;
            }
            Err(Failure::not_found(format!(
                "{line} in {} (see `leasehold status`); nothing to forget",
                db.name
            )))
        }
        Forgotten::Held(info) => {
            let row = Row(info);
            if args.json {
                print_json(&args.key, "held", Some(row.json()))?;
            }
            Err(Failure::refused(format!("{line}; {}", what_now(&args.key, row.held()))))
        }
        // An outcome of a newer library that this CLI does not know: say
        // so rather than guess whether the row is gone.
        other => Err(Failure::error(format!(
            "{line}: the library answered {other:?}, which this CLI does not know: upgrade leasehold-cli (see \
             `leasehold status` for the key's row)"
        ))),
    }
}

fn print_json(key: &str, outcome: &'static str, lease: Option<LeaseJson<'_>>) -> Result<(), Failure> {
    let doc = ForgetJson { key, outcome, lease };
    out::json(&doc)?;
    Ok(())
}

/// What the operator can do about a kept lease of `key`, `held` by the
/// server clock when its row was read.
fn what_now(key: &str, held: bool) -> String {
    let arg = if key.starts_with('-') {
        format!("-- {}", text::shell_word(key))
    } else {
        text::shell_word(key)
    };
    if !held {
        // The statement's snapshot saw the lease free, but a claim took
        // it before the row could be deleted.
        return "it was claimed while forget ran; nothing was deleted. See `leasehold status`, then try again"
            .to_owned();
    }
    format!(
        "nothing was deleted. Stop that run (or wait for it to end), or end the tenure with `leasehold revoke \
         --force {arg}` (the run is cancelled at its next heartbeat), then run `leasehold forget {arg}` again"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lease_is_answered_with_pasteable_commands() {
        assert_eq!(
            what_now("tenant 42", true),
            "nothing was deleted. Stop that run (or wait for it to end), or end the tenure with `leasehold revoke \
             --force 'tenant 42'` (the run is cancelled at its next heartbeat), then run `leasehold forget 'tenant \
             42'` again"
        );
        let msg = what_now("-x", true);
        assert!(
            msg.contains("`leasehold revoke --force -- -x`") && msg.contains("`leasehold forget -- -x`"),
            "{msg}"
        );
    }

    #[test]
    fn a_lease_claimed_while_forget_ran_is_answered_with_try_again() {
        assert_eq!(
            what_now("k", false),
            "it was claimed while forget ran; nothing was deleted. See `leasehold status`, then try again"
        );
    }
}
