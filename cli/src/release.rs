//! `leasehold release KEY [--force]`: end the current tenure of a lease.
//!
//! In one transaction, with the lease row locked:
//!
//! 1. the row gets a fresh fence from `leasehold_fence_seq` and (if it was
//!    held) expires now. The old holder's renewal
//!    (`… WHERE key AND holder AND fence AND expires_at > now`) then finds no
//!    row: its heartbeat reports the lease lost and cancels the run. Its own
//!    late release finds no row either. The next claim, by any replica,
//!    draws a fence above the new one.
//! 2. the fence row of the key's default fenced resource (the key itself, in
//!    `leasehold_fence`) and of every `--resource` is raised to the new
//!    fence, so the old run's next `begin_fenced` is rejected with
//!    `StaleFence` at once, not only after a newer run has written.
//!
//! A lease that is free (expired or released) needs no `--force`: nobody is
//! running under it, but a paused ex-holder may still wake up and write, and
//! this fences it out. A held lease needs `--force`.

use crate::db::Db;
use crate::failure::{Failure, check_name};
use crate::status::{ROW_COLUMNS, Row};
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
    let mut resources = vec![args.key.clone()];
    for resource in &args.resources {
        if !resources.contains(resource) {
            resources.push(resource.clone());
        }
    }
    let key = format!("{:?}", args.key);

    let mut tx = db.pool.begin().await?;
    // FOR UPDATE: no claim, renewal or release of this key can slip in
    // between reading the tenure and ending it.
    let lock = format!("SELECT {ROW_COLUMNS} FROM leasehold_lease l WHERE l.key = $1 FOR UPDATE");
    let old: Option<Row> = sqlx::query_as(sqlx::AssertSqlSafe(lock))
        .bind(&args.key)
        .fetch_optional(&mut *tx)
        .await?;
    let Some(old) = old else {
        tx.rollback().await?;
        return Err(Failure::not_found(format!(
            "no lease with key {key} in {} (see `leasehold status`)",
            db.name
        )));
    };
    if old.held() && !args.force {
        tx.rollback().await?;
        return Err(Failure::refused(format!(
            "lease {key} is held by {} (fence {}, expires {}); nothing changed. Pass --force to end this \
             tenure: the holder's run is cancelled at its next heartbeat and its fenced writes are rejected",
            text::cell(&old.holder),
            old.fence,
            old.expiry_text(),
        )));
    }
    // A new fence from the sequence, so even a renewal that names the old
    // fence fails. A held lease expires now (GREATEST keeps the CHECK
    // true if the server clock stepped back); a free one keeps its expiry.
    const END_TENURE: &str = "
        UPDATE leasehold_lease
           SET fence = nextval('leasehold_fence_seq'),
               expires_at = LEAST(expires_at, GREATEST(clock_timestamp(), acquired_at + interval '1 microsecond'))
         WHERE key = $1
        RETURNING fence";
    let new_fence: i64 = sqlx::query_scalar(END_TENURE)
        .bind(&args.key)
        .fetch_one(&mut *tx)
        .await?;
    // The same rule as FenceGuard::begin_fenced_on: a fence row only rises.
    const RAISE_FENCES: &str = "
        INSERT INTO leasehold_fence AS f (resource, last_fence)
        SELECT r, $2 FROM unnest($1::text[]) AS r
        ON CONFLICT (resource) DO UPDATE
           SET last_fence = GREATEST(f.last_fence, EXCLUDED.last_fence), updated_at = clock_timestamp()";
    sqlx::query(RAISE_FENCES)
        .bind(&resources)
        .bind(new_fence)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;

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
    let names: Vec<String> = resources.iter().map(|r| format!("{r:?}")).collect();
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
