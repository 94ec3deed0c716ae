//! `leasehold check`: is this database ready for leasehold, and what does
//! its clock say?
//!
//! - the server: PostgreSQL 13 or newer, and a primary (leases are writes);
//! - the schema version (`leasehold::schema::schema_version`);
//! - the server clock against this machine's. leasehold never compares the
//!   two (every expiry is computed on the server), so skew is reported, not
//!   failed: it matters for reading logs and dashboards side by side; and
//!   the clock-rate error ρ every job's deadline margin covers;
//! - a claim / claim-by-another / renew / release / reclaim round trip on a
//!   scratch key through `leasehold::store::LeaseStore`, whose row is deleted after;
//! - failover: the server's WAL timeline, the fence sequence's position and
//!   its last jump (schema 6 moves it ahead on every new timeline, so a
//!   promoted standby never repeats a fence), and whether synchronous
//!   replication covers this role's commits (without it a failover loses
//!   the last commits: leases and fence rows, not fence uniqueness). Told,
//!   not failed: asynchronous replication is a choice.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use leasehold::{
    operator::{Forgotten, Revoke},
    store::{Claim, LeaseStore, Renewal},
};
use serde::Serialize;

use crate::db::Db;
use crate::failure::{Failure, describe};
use crate::out;
use crate::text;

/// Scratch keys start with this; a row left behind by a killed check can be
/// deleted safely.
pub(crate) const SCRATCH_PREFIX: &str = "leasehold-cli-check:";

/// Skew above this is worth a warning (but leasehold does not depend on it).
const SKEW_WARNING_SECS: f64 = 1.0;

/// Clock samples; the one with the shortest round trip is kept.
const CLOCK_SAMPLES: usize = 5;

/// Arguments of `leasehold check`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Print the checks as JSON on standard output (the exit code is the
    /// same as without --json).
    #[arg(long)]
    json: bool,
}

/// `--json` output.
#[derive(Serialize)]
struct CheckJson<'a> {
    /// `user@host:port/database`.
    database: &'a str,
    /// Every check passed (skipped ones aside).
    passed: bool,
    checks: Vec<CheckResult>,
}

/// One check in `--json` output.
#[derive(Serialize)]
struct CheckResult {
    /// `server`, `schema`, `clock`, `lease` or `failover`.
    check: &'static str,
    /// `ok`, `fail` or `skip`.
    status: &'static str,
    /// What it found, as the text output says it (lines joined with `\n`).
    detail: String,
}

/// The indentation of a detail's further lines in the text output.
const CONTINUED: &str = "\n               ";

pub(crate) async fn run(db: &Db, args: &Args) -> Result<(), Failure> {
    let mut checks = Vec::new();
    let mut report = |check: &'static str, outcome: Result<String, String>| -> Result<(), Failure> {
        let (status, detail) = match outcome {
            Ok(detail) => ("ok", detail),
            Err(detail) => ("fail", detail),
        };
        if !args.json {
            let shown = if status == "ok" { "ok" } else { "FAIL" };
            out::line(format_args!("{check:<8} {shown:<5} {detail}"))?;
        }
        checks.push(CheckResult {
            check,
            status,
            detail: detail.replace(CONTINUED, "\n"),
        });
        Ok(())
    };

    report("server", server(db).await)?;
    let schema = schema(db).await;
    let schema_ok = schema.is_ok();
    report("schema", schema)?;
    report("clock", clock(db).await)?;
    if schema_ok {
        report("lease", lease_round_trip(db).await)?;
        report("failover", failover(db).await)?;
    }
    let skipped = "no usable schema (run `leasehold migrate`)";
    if !schema_ok {
        checks.push(CheckResult {
            check: "lease",
            status: "skip",
            detail: skipped.to_owned(),
        });
        if !args.json {
            out::line(format_args!("{:<8} skip  {skipped}", "lease"))?;
        }
    }
    let failed = checks.iter().filter(|c| c.status == "fail").count();
    if args.json {
        out::json(&CheckJson {
            database: &db.name,
            passed: failed == 0,
            checks,
        })?;
    }
    if failed > 0 {
        return Err(Failure::error(format!(
            "{failed} check{} failed on {}",
            if failed == 1 { "" } else { "s" },
            db.name
        )));
    }
    if !args.json {
        out::line(format_args!("all checks passed on {}", db.name))?;
    }
    Ok(())
}

async fn server(db: &Db) -> Result<String, String> {
    let (version, number, standby): (String, i32, bool) = sqlx::query_as(
        "SELECT current_setting('server_version'), current_setting('server_version_num')::int, pg_is_in_recovery()",
    )
    .fetch_one(&db.pool)
    .await
    .map_err(|e| format!("database error: {}", describe(&e)))?;
    if number < 130_000 {
        return Err(format!("PostgreSQL {version}: leasehold needs 13 or newer"));
    }
    if standby {
        return Err(format!(
            "PostgreSQL {version} is a standby (read-only): leases are writes, connect to the primary"
        ));
    }
    Ok(format!("PostgreSQL {version}, primary, at {}", db.name))
}

async fn schema(db: &Db) -> Result<String, String> {
    let version = db.schema_version().await.map_err(|f| f.message)?;
    let verdict = leasehold::schema::check_schema(&db.pool).await;
    let supported = leasehold::schema::SCHEMA_VERSION;
    match (version, verdict) {
        (Some(v), Ok(())) => Ok(format!("version {v} (this CLI supports {supported})")),
        (_, Err(e)) => Err(db.failure(e).message),
        (None, Ok(())) => Err("no version recorded".to_owned()),
    }
}

/// One reading of the server clock: the server's time and this machine's
/// at the midpoint of the round trip.
struct Sample {
    rtt: Duration,
    server: DateTime<Utc>,
    local_midpoint: DateTime<Utc>,
}

async fn clock(db: &Db) -> Result<String, String> {
    let mut best: Option<Sample> = None;
    for _ in 0..CLOCK_SAMPLES {
        let local_before = Utc::now();
        let sent = Instant::now();
        let server: DateTime<Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
            .fetch_one(&db.pool)
            .await
            .map_err(|e| format!("database error: {}", describe(&e)))?;
        let rtt = sent.elapsed();
        let half = chrono::TimeDelta::from_std(rtt / 2).unwrap_or_default();
        let sample = Sample {
            rtt,
            server,
            local_midpoint: local_before + half,
        };
        if best.as_ref().is_none_or(|b| sample.rtt < b.rtt) {
            best = Some(sample);
        }
    }
    let Some(best) = best else {
        return Err("no clock sample".to_owned());
    };
    let skew = text::secs(best.server - best.local_midpoint);
    let rtt_ms = best.rtt.as_secs_f64() * 1e3;
    let direction = if skew >= 0.0 { "ahead of" } else { "behind" };
    let amount = if skew.abs() < 1.0 {
        format!("{:.1}ms", skew.abs() * 1e3)
    } else {
        text::span(skew)
    };
    let mut line = format!(
        "server clock is {amount} {direction} this machine's (skew {skew:+.4}s, round trip {rtt_ms:.2}ms so \
         ±{:.2}ms); server time {}",
        rtt_ms / 2.0,
        best.server.format("%Y-%m-%d %H:%M:%S%.3fZ"),
    );
    // Skew is harmless; a *rate* error is what the deadline margin must
    // cover (docs/design.md §5), and no single reading can measure it.
    line.push_str(&format!(
        "\n               rate: every job's deadline margin covers clocks (this machine's and the server's) whose \
         rates are off by up to ρ = {} % (NTP slews by at most 0.05 %; the default margin, lease/10, covers 5 %)",
        leasehold_rules::CLOCK_RATE_BOUND_PERCENT
    ));
    if skew.abs() > SKEW_WARNING_SECS {
        line.push_str(
            "\n               warning: leasehold itself only uses the server clock, but logs and dashboards \
             from this machine will disagree with the database by that much; check NTP",
        );
    }
    Ok(line)
}

fn random_suffix() -> String {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

async fn lease_round_trip(db: &Db) -> Result<String, String> {
    let suffix = random_suffix();
    let key = format!("{SCRATCH_PREFIX}{suffix}");
    let store = LeaseStore::new(db.pool.clone());
    let started = Instant::now();
    let outcome = round_trip(&store, &key, &suffix).await;
    let took = started.elapsed();
    // Whatever happened, leave no scratch row behind. A round trip cut
    // short may have left the key held: end that tenure, then forget it.
    let cleanup = match store.controls().forget(&key).await {
        Ok(Forgotten::Held(_)) => match store.controls().revoke(&key, Revoke::Force, &[]).await {
            Ok(_) => store.controls().forget(&key).await.map(|_| ()),
            Err(e) => Err(e),
        },
        other => other.map(|_| ()),
    };
    let (first, second) = outcome?;
    if let Err(e) = cleanup {
        return Err(format!("round trip ok, but deleting scratch key {key} failed: {e}"));
    }
    Ok(format!(
        "round trip ok on {key}: claim (fence {first}), refused to a second holder, renew, release, \
         reclaim (fence {second}) in {:.1}ms; scratch row deleted",
        took.as_secs_f64() * 1e3
    ))
}

/// The round trip itself: fences of the two tenures.
async fn round_trip(store: &LeaseStore, key: &str, suffix: &str) -> Result<(i64, i64), String> {
    let ttl = Duration::from_secs(30);
    let a = format!("leasehold-cli-check-{suffix}-a");
    let b = format!("leasehold-cli-check-{suffix}-b");
    let step = |what: &'static str| move |e: leasehold::Error| format!("{what} failed: {e}");

    let first = match store.claim(key, &a, ttl).await.map_err(step("claim"))? {
        Claim::Acquired(lease) => lease,
        other => return Err(format!("claim of a new scratch key did not acquire it: {other:?}")),
    };
    match store.claim(key, &b, ttl).await.map_err(step("second claim"))? {
        Claim::HeldElsewhere { .. } => {}
        other => {
            return Err(format!(
                "a second holder's claim of a held lease was not refused: {other:?}"
            ));
        }
    }
    match store.renew(&first, ttl).await.map_err(step("renew"))? {
        Renewal::Renewed(_) => {}
        Renewal::Lost => return Err("renewal of a lease just claimed reported it lost".to_owned()),
        other => return Err(format!("renewal of a lease just claimed was not applied: {other:?}")),
    }
    if !store.release(key, &a, first.fence).await.map_err(step("release"))? {
        return Err("release of a lease just claimed found no tenure to end".to_owned());
    }
    let second = match store.claim(key, &b, ttl).await.map_err(step("reclaim"))? {
        Claim::Acquired(lease) => lease,
        other => return Err(format!("claim after release did not acquire the lease: {other:?}")),
    };
    if second.fence <= first.fence {
        return Err(format!(
            "fence did not grow: {} after {}: fencing is broken in this database",
            second.fence, first.fence
        ));
    }
    if !store
        .release(key, &b, second.fence)
        .await
        .map_err(step("second release"))?
    {
        return Err("release of the second tenure found nothing to end".to_owned());
    }
    Ok((first.fence, second.fence))
}

/// The failover report: timeline, fence sequence, synchronous replication.
async fn failover(db: &Db) -> Result<String, String> {
    let error = |e: sqlx::Error| format!("database error: {}", describe(&e));
    let (timeline, recorded, jumped_from, jumped_to): (i64, Option<i64>, Option<i64>, Option<i64>) = sqlx::query_as(
        "SELECT leasehold_timeline_id(), t.timeline, t.jumped_from, t.jumped_to
               FROM (SELECT 1) AS one LEFT JOIN leasehold_timeline AS t ON true",
    )
    .fetch_one(&db.pool)
    .await
    .map_err(error)?;
    let (position, called): (i64, bool) = sqlx::query_as("SELECT last_value, is_called FROM leasehold_fence_seq")
        .fetch_one(&db.pool)
        .await
        .map_err(error)?;
    let (commit, standbys): (String, String) =
        sqlx::query_as("SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names')")
            .fetch_one(&db.pool)
            .await
            .map_err(error)?;
    let next = if called { position + 1 } else { position };
    let jump = match (recorded, jumped_from.zip(jumped_to)) {
        (Some(t), Some((from, to))) if t == timeline => {
            format!("moved from {from} to {to} when fences were first drawn on it")
        }
        (Some(t), None) if t == timeline => "no jump on it (the schema was applied on it)".to_owned(),
        _ => "no fence drawn on it yet: the first one moves the sequence ahead".to_owned(),
    };
    let waits = matches!(commit.as_str(), "on" | "remote_write" | "remote_apply");
    let replication = if waits && !standbys.trim().is_empty() {
        format!(
            "synchronous replication covers this role (synchronous_commit = {commit}, \
             synchronous_standby_names = '{standbys}'): a failover loses no acknowledged commit"
        )
    } else if standbys.trim().is_empty() {
        format!(
            "asynchronous: synchronous_standby_names is empty (synchronous_commit = {commit} for this role), \
             so a failover to a standby can lose the last commits (recent claims, fence-row advances); \
             fences still never repeat"
        )
    } else {
        format!(
            "asynchronous for this role: synchronous_commit = {commit} does not wait for the standbys \
             ('{standbys}'), so a failover can lose its last commits; fences still never repeat"
        )
    };
    Ok(format!(
        "timeline {timeline}; fence sequence next at {next}, {jump}\n               {replication}"
    ))
}
