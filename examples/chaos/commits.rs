//! Which writes committed together. A trigger on `leasehold_lease` logs
//! every committed claim, renewal and release with its transaction id and
//! times, and the ledger and counter history record their transaction ids,
//! so the checker can tell whether leasehold's own lease statements — each
//! one autocommit statement — committed on their own, or inside a
//! transaction that something else had opened on their connection (a
//! connection its pool handed out inside a transaction: `poison.rs`).
//!
//! A trigger only sees what commits: a lease statement that ran inside such
//! a transaction and was rolled back with it leaves no row, which is what
//! [`runs_claims_committed`] looks for.

use std::collections::{BTreeMap, BTreeSet};

use sqlx::PgPool;

use crate::check::{Check, Input, secs};

/// Created after `leasehold::migrate`, on the database under test.
pub const SCHEMA: &str = "
CREATE TABLE chaos_lease_history (
    id         BIGSERIAL   PRIMARY KEY,
    key        TEXT        NOT NULL,
    holder     TEXT        NOT NULL,
    fence      BIGINT      NOT NULL,
    what       TEXT        NOT NULL,
    xid        xid8        NOT NULL DEFAULT pg_current_xact_id(),
    xact_start TIMESTAMPTZ NOT NULL DEFAULT transaction_timestamp(),
    stmt_start TIMESTAMPTZ NOT NULL DEFAULT statement_timestamp(),
    at         TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    expires_at TIMESTAMPTZ NOT NULL,
    -- The claim's server time as the row says it (the drill's takeover).
    acquired_at TIMESTAMPTZ NOT NULL
);
CREATE FUNCTION chaos_lease_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_lease_history (key, holder, fence, expires_at, acquired_at, what)
    VALUES (NEW.key, NEW.holder, NEW.fence, NEW.expires_at, NEW.acquired_at,
            CASE WHEN TG_OP = 'INSERT' AND NEW.expires_at <= NEW.acquired_at + interval '1 millisecond'
                     THEN 'register'
                 WHEN TG_OP = 'INSERT' OR OLD.fence IS DISTINCT FROM NEW.fence THEN 'claim'
                 WHEN OLD.expires_at = NEW.expires_at THEN 'other'
                 WHEN NEW.expires_at <= clock_timestamp() THEN 'release'
                 ELSE 'renewal' END);
    RETURN NEW;
END $$;
CREATE TRIGGER chaos_lease_log AFTER INSERT OR UPDATE ON leasehold_lease
    FOR EACH ROW EXECUTE FUNCTION chaos_lease_log();
";

/// A committed write to one `leasehold_lease` row. Times are the server's,
/// in µs since the epoch.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LeaseWrite {
    pub key: String,
    pub holder: String,
    pub fence: i64,
    /// `claim` (a new fence), `renewal`, `release` (expired now: a release
    /// or the `expire` fault), `register`, or `other`.
    pub what: String,
    pub xid: i64,
    pub xact_start: i64,
    /// The statement's start: rows of one statement share it, two
    /// statements never do.
    pub stmt_start: i64,
    pub at: i64,
    /// The lease's expiry as this write left it.
    pub expires_at: i64,
}

pub async fn lease_writes(pool: &PgPool) -> Result<Vec<LeaseWrite>, sqlx::Error> {
    sqlx::query_as(
        "SELECT key, holder, fence, what, xid::text::int8 AS xid,
                (extract(epoch FROM xact_start) * 1000000)::int8 AS xact_start,
                (extract(epoch FROM stmt_start) * 1000000)::int8 AS stmt_start,
                (extract(epoch FROM at) * 1000000)::int8 AS at,
                (extract(epoch FROM expires_at) * 1000000)::int8 AS expires_at
           FROM chaos_lease_history ORDER BY id",
    )
    .fetch_all(pool)
    .await
}

/// `claims N / renewals N / releases N`, for the verdict.
pub fn summary(writes: &[LeaseWrite]) -> String {
    let n = |what: &str| writes.iter().filter(|w| w.what == what).count();
    format!("{} / {} / {}", n("claim"), n("renewal"), n("release"))
}

/// Check 13: every transaction that wrote a lease row ran exactly one
/// statement, and wrote nothing else. leasehold claims, renews and releases
/// with single autocommit statements, so two statements in one transaction,
/// or a lease write committed with a job's ledger row or counter write,
/// means they ran inside a transaction that nobody meant them to: they were
/// invisible to every other replica until it committed (holding the row
/// locks meanwhile), and would have been lost had it rolled back.
pub fn lease_writes_alone(input: &Input) -> Check {
    let t = |us: i64| secs(us, input.observe_from);
    let mut by_xid: BTreeMap<i64, Vec<&LeaseWrite>> = BTreeMap::new();
    for w in &input.lease_writes {
        by_xid.entry(w.xid).or_default().push(w);
    }
    let mut ledger: BTreeMap<i64, Vec<(&str, i64)>> = BTreeMap::new();
    for r in &input.ledger {
        ledger.entry(r.xid).or_default().push((r.key.as_str(), r.fence));
    }
    let mut counter: BTreeMap<i64, Vec<(&str, i64)>> = BTreeMap::new();
    for c in &input.counter {
        counter.entry(c.xid).or_default().push((c.key.as_str(), c.new_fence));
    }
    let mut check = Check::listing("leasehold's lease writes commit on their own", 10);
    for (xid, writes) in &by_xid {
        check.checked += 1;
        let statements: BTreeSet<i64> = writes.iter().map(|w| w.stmt_start).collect();
        let rows = ledger.get(xid).map(Vec::as_slice).unwrap_or(&[]);
        let counts = counter.get(xid).map(Vec::as_slice).unwrap_or(&[]);
        if statements.len() <= 1 && rows.is_empty() && counts.is_empty() {
            continue;
        }
        let lease: Vec<String> = writes
            .iter()
            .map(|w| {
                format!(
                    "{} {} fence {} by {} at {}",
                    w.what,
                    w.key,
                    w.fence,
                    w.holder,
                    t(w.stmt_start)
                )
            })
            .collect();
        let mut others = Vec::new();
        if !rows.is_empty() {
            let runs: BTreeSet<&(&str, i64)> = rows.iter().collect();
            others.push(format!("{} ledger rows of {runs:?}", rows.len()));
        }
        if !counts.is_empty() {
            let runs: BTreeSet<&(&str, i64)> = counts.iter().collect();
            others.push(format!("{} counter writes of {runs:?}", counts.len()));
        }
        let first = writes.first().map(|w| w.xact_start).unwrap_or_default();
        let last = writes.iter().map(|w| w.at).max().unwrap_or_default();
        check.fail(format!(
            "transaction {xid} opened at {}, lease writes until {}: {} statement(s) [{}]{}",
            t(first),
            t(last),
            statements.len(),
            lease.join("; "),
            if others.is_empty() {
                String::new()
            } else {
                format!(", committed with {}", others.join(" and "))
            }
        ));
    }
    check
}

/// Check 14: every run a replica started was claimed by a committed claim
/// (the lease row carried the run's fence at some commit). A run whose
/// claim was rolled back ran without a lease as far as every other replica
/// could see. A run started inside an asynchronous promotion's lag window
/// is not checked: the promoted server lost its claim with the window.
pub fn runs_claims_committed(input: &Input) -> Check {
    let claims: BTreeSet<(&str, i64)> = input
        .lease_writes
        .iter()
        .filter(|w| w.what == "claim")
        .map(|w| (w.key.as_str(), w.fence))
        .collect();
    let mut check = Check::new("every run's claim committed");
    for e in input.events.iter().filter(|e| e.kind == "start") {
        if input.in_lost_window(e.at) {
            continue;
        }
        check.checked += 1;
        if !claims.contains(&(e.key.as_str(), e.fence)) {
            check.fail(format!(
                "{} fence {} (run {}): started, but no committed claim ever gave the lease that fence",
                e.key, e.fence, e.detail
            ));
        }
    }
    check
}
