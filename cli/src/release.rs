//! `leasehold release KEY [--force]`: end the current tenure of a lease.
//!
//! The library's `LeaseStore::revoke` does it, in one statement with the
//! row locked: the row takes a fresh fence (and, if held, expires now), so
//! the old holder's renewal finds no row and cancels its run; and the fence
//! rows of the key and of every `--resource` rise to the new fence, so the
//! old run's next `begin_fenced` is rejected at once. This file only parses
//! and presents.
//!
//! A lease that is free (expired or released) needs no `--force`: nobody is
//! running under it, but a paused ex-holder may still wake up and write, and
//! this fences it out. A held lease needs `--force`.

use leasehold::{Revoke, Revoked};

use crate::db::Db;
use crate::failure::{Failure, check_name};
use crate::ops::{self, Row};
use crate::text;

/// Arguments of `leasehold release`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The lease key.
    key: String,
    /// Release even though the lease is held: the holder's run is cancelled
    /// at its next heartbeat and its fenced writes are rejected.
    #[arg(long)]
    force: bool,
    /// Also raise this fenced resource (a `begin_fenced_on` resource of this
    /// job) to the new fence. The key itself is always raised. Repeatable.
    /// Name only resources that belong to this key.
    #[arg(long = "resource", value_name = "R")]
    resources: Vec<String>,
}

impl Args {
    /// Checks the names before anything is sent (or even connected).
    pub(crate) fn validate(&self) -> Result<(), Failure> {
        check_name("lease key", &self.key)?;
        for resource in &self.resources {
            check_name("fenced resource", resource)?;
        }
        Ok(())
    }
}

pub(crate) async fn run(db: &Db, args: &Args) -> Result<(), Failure> {
    args.validate()?;
    db.require_schema().await?;
    let key = format!("{:?}", args.key);
    let revoke = if args.force { Revoke::Force } else { Revoke::IfFree };
    let resources: Vec<&str> = args.resources.iter().map(String::as_str).collect();
    // Through `Operator`, so the key's history records who released it.
    let operator = ops::operator(db)?;
    let (old, new_fence) = match operator
        .revoke(&args.key, revoke, &resources)
        .await
        .map_err(|e| db.failure(e))?
    {
        Revoked::Ended { previous, fence } => (Row::from(previous), fence),
        Revoked::Held(info) => {
            let held = Row::from(info);
            return Err(Failure::refused(format!(
                "lease {key} is held by {} (fence {}, expires {}); nothing changed. Pass --force to end this \
                 tenure: the holder's run is cancelled at its next heartbeat and its fenced writes are rejected",
                text::cell(&held.holder),
                held.fence,
                held.expiry_text(),
            )));
        }
        _ => {
            return Err(Failure::not_found(format!(
                "no lease with key {key} in {} (see `leasehold status`)",
                db.name
            )));
        }
    };
    let mut raised = vec![args.key.as_str()];
    for resource in &resources {
        if !raised.contains(resource) {
            raised.push(resource);
        }
    }

    let holder = text::cell(&old.holder);
    if old.held() {
        println!(
            "released {key}: holder {holder} lost fence {} ({} left); new fence {new_fence}",
            old.fence,
            text::span(old.expires_in()),
        );
        println!("  {holder}'s next renewal finds the lease gone and cancels its run;");
    } else {
        println!(
            "lease {key} was already free (last holder {holder}, fence {}, {}); new fence {new_fence}",
            old.fence,
            old.expiry_text(),
        );
    }
    let names: Vec<String> = raised.iter().map(|r| format!("{r:?}")).collect();
    println!(
        "  begin_fenced on {} now rejects every fence below {new_fence} (StaleFence);",
        names.join(", ")
    );
    match old.due_text().as_str() {
        "never" => println!("  the job runs again when triggered, with a fence above {new_fence}"),
        due if due.starts_with("in ") => {
            println!("  the job is next due {due}; its next run gets a fence above {new_fence}")
        }
        _ => println!("  the job is due now: the next claim, on any replica, runs it with a fence above {new_fence}"),
    }
    Ok(())
}
