//! `leasehold forget KEY [--json]`: delete the lease row of a key that no
//! replica registers any more (a removed tenant, a renamed job).
//!
//! All through `leasehold::Operator::forget` (recorded in the key's
//! history; `LeaseStore::forget` is one statement): the row is
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

use leasehold::Forgotten;
use serde::Serialize;

use crate::db::Db;
use crate::failure::Failure;
use crate::failure::check_name;
use crate::ops::{self, LeaseJson, Row};
use crate::text;

/// Arguments of `leasehold forget`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The lease key.
    key: String,
    /// Print the outcome as JSON on standard output (in every outcome; the
    /// exit code is the same as without --json).
    #[arg(long)]
    json: bool,
}

impl Args {
    /// Checks the key before anything is sent (or even connected).
    pub(crate) fn validate(&self) -> Result<(), Failure> {
        check_name("lease key", &self.key)
    }
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
    args.validate()?;
    db.require_schema().await?;
    // Through `Operator`, so the key's history records who forgot it.
    let outcome = ops::operator(db)?.forget(&args.key).await.map_err(|e| db.failure(e))?;
    let key = format!("{:?}", args.key);
    match outcome {
        Forgotten::Deleted => {
            if args.json {
                print_json(&args.key, "deleted", None)?;
            } else {
                println!(
                    "forgot {key}: its lease row (schedule, last holder) is deleted from {}",
                    db.name
                );
                println!("  a replica that still registers {key} creates it again, due at its next slot;");
                println!("  its fences stay above every fence handed out so far (they come from a sequence)");
            }
            Ok(())
        }
        Forgotten::NotFound => {
            if args.json {
                print_json(&args.key, "not-found", None)?;
            }
            Err(Failure::not_found(format!(
                "no lease with key {key} in {} (see `leasehold status`); nothing to forget",
                db.name
            )))
        }
        Forgotten::Held(info) => {
            let row = Row::from(info);
            if args.json {
                print_json(&args.key, "held", Some(row.json()))?;
            }
            Err(Failure::refused(held_message(&key, &args.key, &row)))
        }
        // An outcome of a newer library that this CLI does not know: say
        // so rather than guess whether the row is gone.
        other => Err(Failure::error(format!(
            "forget {key}: the library answered {other:?}, which this CLI does not know: upgrade \
             leasehold-cli (see `leasehold status` for the key's row)"
        ))),
    }
}

fn print_json(key: &str, outcome: &'static str, lease: Option<LeaseJson<'_>>) -> Result<(), Failure> {
    let doc = ForgetJson { key, outcome, lease };
    let json = serde_json::to_string_pretty(&doc).map_err(|e| Failure::error(format!("writing JSON: {e}")))?;
    println!("{json}");
    Ok(())
}

/// Why a held lease was kept, and what the operator can do about it.
fn held_message(quoted: &str, key: &str, row: &Row) -> String {
    let holder = text::cell(&row.holder);
    let arg = if key.starts_with('-') {
        format!("-- {}", text::shell_word(key))
    } else {
        text::shell_word(key)
    };
    if !row.held() {
        // The statement's snapshot saw the lease free, but a claim took
        // it before the row could be deleted: the row shows the tenure
        // before that claim.
        return format!(
            "lease {quoted} was claimed while forget ran (before that: holder {holder}, fence {}, {}); \
             nothing was deleted. See `leasehold status`, then try again",
            row.fence,
            row.expiry_text(),
        );
    }
    format!(
        "lease {quoted} is held by {holder} (fence {}, {} left); nothing was deleted. Stop that run (or wait \
         for it to end), or end the tenure with `leasehold release --force {arg}` (the run is cancelled at \
         its next heartbeat), then run `leasehold forget {arg}` again",
        row.fence,
        text::span(row.expires_in()),
    )
}

#[cfg(test)]
mod tests {
    use chrono::{TimeDelta, Utc};

    use super::*;

    fn row(key: &str, expires_in_secs: i64) -> Row {
        let now = Utc::now();
        Row {
            key: key.to_owned(),
            holder: "web-1".to_owned(),
            fence: 7,
            acquired_at: now - TimeDelta::seconds(60),
            expires_at: now + TimeDelta::seconds(expires_in_secs),
            next_due_at: None,
            job_name: None,
            server_now: now,
            triggered_only: false,
            state: if expires_in_secs > 0 {
                leasehold::KeyState::Held
            } else {
                leasehold::KeyState::Free
            },
        }
    }

    #[test]
    fn a_held_lease_names_holder_fence_time_left_and_pasteable_commands() {
        let msg = held_message("\"tenant 42\"", "tenant 42", &row("tenant 42", 41));
        assert!(
            msg.starts_with("lease \"tenant 42\" is held by web-1 (fence 7, 41s left); nothing was deleted"),
            "{msg}"
        );
        assert!(
            msg.contains("`leasehold release --force 'tenant 42'`") && msg.contains("`leasehold forget 'tenant 42'`"),
            "{msg}"
        );
        let msg = held_message("\"-x\"", "-x", &row("-x", 41));
        assert!(
            msg.contains("`leasehold release --force -- -x`") && msg.contains("`leasehold forget -- -x`"),
            "{msg}"
        );
    }

    #[test]
    fn a_lease_claimed_while_forget_ran_is_not_reported_with_time_left() {
        // `Held` with the row as the statement's snapshot saw it: free.
        let msg = held_message("\"k\"", "k", &row("k", -5));
        assert!(msg.contains("was claimed while forget ran"), "{msg}");
        assert!(msg.contains("holder web-1, fence 7, expired 5.0s ago"), "{msg}");
        assert!(!msg.contains(" left"), "{msg}");
    }
}
