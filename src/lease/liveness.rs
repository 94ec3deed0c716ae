//! Liveness sessions: how a replica's crash hands its runs over in about a
//! second instead of a whole lease (invariant 10, docs/design.md).
//!
//! A runtime *registers* the connection it listens on — a session of its
//! own, proved not to go through a pooler (`LeaseStore::is_own_session`) —
//! and confirms the registration every [`CONFIRM_EVERY`]. Its claims stamp
//! each run's lease row with the registration (`leasehold_lease.owner`).
//! Another replica may take such a run over before its lease expires only
//! when the registration is **dead**, [`dead_owner!`]: a confirmation of
//! another runtime *saw it gone* a grace ([`GRACE`]) ago or more by the
//! server clock, and the stamp is genuine (the run was claimed while its
//! registration was confirmed; a replica of schema version 10 claims
//! without stamping). Each confirmation stamps `gone_seen_at` on every other
//! registration not seen gone yet that is
//!
//! 1. *of this server's life*: registered after the server last started
//!    (rows of an UNLOGGED table survive a clean restart, whose sessions
//!    did not), and
//! 2. *gone*: the session-level advisory lock the registration took is
//!    free, which PostgreSQL guarantees the moment the session ends — a
//!    killed process's socket closes, its backend exits. A session that
//!    ended never comes back, so the sighting stays true.
//!
//! The grace counts from the sighting, not from the last confirmation: a
//! live process whose session ends always has a grace to read the error and
//! re-point its runs, even if it had been silent (a stall, a brief cut) just
//! before. A confirmation cannot succeed once its session is gone, so the
//! sighting is after the last confirmation, and the runtime's own stop
//! (counted from its last confirmation) comes before any takeover.
//!
//! A frozen process keeps its session (the kernel keeps its socket), so 2
//! fails and its runs keep their leases; so does a partitioned one, whose
//! session the server keeps for at least [`SESSION_HORIZON`] (this module
//! sets the session's TCP timeouts). A live process whose session ended
//! (`pg_terminate_backend`, a TCP reset) sees the error, registers again
//! and moves its runs' stamps to the new registration with
//! [`LeaseStore::repoint`] — refused for a run whose old registration is
//! already dead, which the runtime then stops, before its grace ends
//! (`runtime/liveness.rs`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{Executor, Postgres};

use super::LeaseStore;
use super::listen::WAKE_CHANNEL;
use crate::error::Result;

/// How often a runtime confirms its registration.
pub(crate) const CONFIRM_EVERY: Duration = Duration::from_millis(250);

/// How long after its session was first seen gone a registration's runs
/// may be taken over: a live replica whose session ended has this long to
/// register again and keep its runs (or stop them). A busy replica's late
/// confirmations never count against it: its session is alive.
pub(crate) const GRACE: Duration = Duration::from_secs(1);

/// How long the server keeps a liveness session whose client went silent
/// (TCP keepalives and user timeout of the session): a partitioned replica
/// keeps its session, hence its runs, at least this long. Runs with a
/// longer lease are claimed without a stamp and fall back to their lease.
pub(crate) const SESSION_HORIZON: Duration = Duration::from_secs(3600);

/// The first key of the liveness sessions' advisory locks ("lhld" in
/// ASCII), the second being the session's pid: a literal, for `concat!`.
macro_rules! liveness_lock_ns {
    () => {
        "1818783844"
    };
}

/// A dead registration, for the lease row's stamp `$owner` (an SQL
/// expression) of a run acquired at `$acquired`: an SQL boolean. Seen gone
/// (by a confirmation's `seen`, which tests the session's lock and the
/// server's life) a grace ago or more. The lock is not tested again: a
/// session that ended never comes back, and its registration's process, if
/// it lives, registers anew under another id.
macro_rules! dead_owner {
    (owner = $owner:literal, acquired = $acquired:literal) => {
        concat!(
            "EXISTS (SELECT 1 FROM leasehold_replica AS r WHERE r.id = ",
            $owner,
            " AND ",
            $acquired,
            " < r.confirmed_at + r.grace
                AND /* guard:liveness.gone_for_grace */ r.gone_seen_at + r.grace <= clock_timestamp())"
        )
    };
}

/// The registration of a liveness session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Registration {
    pub(crate) id: i64,
    /// When the server last started, as the registration saw it: a server
    /// that answers with another start has restarted since, so none of the
    /// runs stamped with this registration can be taken over early.
    pub(crate) server_started: DateTime<Utc>,
}

/// What one confirmation found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Confirmed {
    /// False when the registration's row is gone (the server crashed, or a
    /// replica cleaned it up after an hour without confirmation), or the
    /// statement ran on another session than the one that registered: the
    /// runtime registers again.
    pub(crate) still_registered: bool,
    /// Keys of dead registrations' runs this confirmation woke.
    pub(crate) woken: i64,
}

impl LeaseStore {
    /// Registers the session `conn` for `holder`: takes the session's lock,
    /// keeps the server from ending the session for [`SESSION_HORIZON`]
    /// (no idle-session timeout; TCP keepalives and user timeout at least
    /// that long), and inserts the registration. Run once per session.
    pub(crate) async fn register_liveness<'c, E>(&self, conn: E, holder: &str) -> Result<Registration>
    where
        E: Executor<'c, Database = Postgres>,
    {
        // $1 holder, $2 grace seconds, $3 horizon seconds (text).
        // - `set_config(…, false)`: for the session. `idle_session_timeout`
        //   0: a frozen client's session is not ended for being idle. The
        //   TCP settings only apply over TCP (a Unix socket has none).
        // - `pg_advisory_lock`: session scope, released by PostgreSQL when
        //   the session ends, whatever the client did — the fact a claimer
        //   tests. The pid makes it this session's own.
        const REGISTER: &str = concat!(
            "
            WITH s AS (
                SELECT set_config('idle_session_timeout', '0', false),
                       set_config('tcp_keepalives_idle', $3, false),
                       set_config('tcp_keepalives_interval', '60', false),
                       set_config('tcp_keepalives_count', '10', false),
                       set_config('tcp_user_timeout', ($3::int8 * 1000)::text, false),
                       pg_advisory_lock(",
            liveness_lock_ns!(),
            ", pg_backend_pid())
            )
            INSERT INTO leasehold_replica (pid, holder, registered_at, confirmed_at, grace)
            SELECT pg_backend_pid(), $1, clock_timestamp(), clock_timestamp(), make_interval(secs => $2)
              FROM s
            RETURNING id, pg_postmaster_start_time()"
        );
        let (id, server_started): (i64, DateTime<Utc>) = sqlx::query_as(REGISTER)
            .bind(holder)
            .bind(GRACE.as_secs_f64())
            .bind(SESSION_HORIZON.as_secs().to_string())
            .fetch_one(conn)
            .await?;
        Ok(Registration { id, server_started })
    }

    /// Confirms `registration` on its own session, and wakes the runs of
    /// registrations that died since the last look (one replica reports
    /// each, whichever confirms first).
    pub(crate) async fn confirm_liveness<'c, E>(&self, conn: E, registration: Registration) -> Result<Confirmed>
    where
        E: Executor<'c, Database = Postgres>,
    {
        // $1 registration id, $2 the wake channel.
        // - `me`: the confirmation, on the registering session only (its
        //   pid): a registration is confirmed only while its lock is held.
        //   No row means the registration is gone, or this is another
        //   session (a driver that reconnected on its own): register again.
        // - `dead`: marks each newly dead registration reported, so it is
        //   reported once (`dead_owner!` on its own row: any run stamped
        //   with it while it was confirmed).
        // - `woken`: one notification per run stamped with a dead
        //   registration and still within its lease; the replicas that run
        //   the key claim it at once. A hash join on an empty `dead` reads
        //   no lease row.
        // - `seen`: stamps `gone_seen_at` on each other registration whose
        //   session is gone (its lock free; tried only for one of this
        //   server's life, whose lock a live session would hold), where
        //   `dead_owner!` starts its grace. Not the rows `dead` reports:
        //   those were seen already (one statement updates a row once).
        // - `gone`: registrations not confirmed for an hour are dropped (a
        //   missing registration is never dead: its runs fall back to
        //   their leases).
        const CONFIRM: &str = concat!(
            "
            WITH me AS (
                UPDATE leasehold_replica SET confirmed_at = clock_timestamp()
                 WHERE id = $1 AND pid = pg_backend_pid()
                RETURNING id
            ), dead AS (
                UPDATE leasehold_replica AS d SET reported_at = clock_timestamp()
                 WHERE d.reported_at IS NULL AND d.id <> $1
                   AND ",
            dead_owner!(owner = "d.id", acquired = "d.confirmed_at"),
            "
                RETURNING d.id
            ), woken AS (
                SELECT pg_notify($2, l.key)
                  FROM leasehold_lease AS l JOIN dead ON l.owner = dead.id
                 WHERE l.expires_at > clock_timestamp()
            ), seen AS (
                UPDATE leasehold_replica AS n SET gone_seen_at = clock_timestamp()
                 WHERE n.gone_seen_at IS NULL AND n.id <> $1
                   AND CASE WHEN /* guard:liveness.this_server_life */ n.registered_at > pg_postmaster_start_time()
                            THEN /* guard:liveness.session_gone */ pg_try_advisory_xact_lock(",
            liveness_lock_ns!(),
            ", n.pid)
                            ELSE false END
            ), gone AS (
                DELETE FROM leasehold_replica AS g
                 WHERE g.id <> $1 AND g.confirmed_at < clock_timestamp() - interval '1 hour'
            )
            SELECT EXISTS (SELECT 1 FROM me) AS still_registered, (SELECT count(*) FROM woken) AS woken"
        );
        let (still_registered, woken): (bool, i64) = sqlx::query_as(CONFIRM)
            .bind(registration.id)
            .bind(WAKE_CHANNEL)
            .fetch_one(conn)
            .await?;
        Ok(Confirmed {
            still_registered,
            woken,
        })
    }

    /// Ends `registration` on its own session, before the session closes
    /// at shutdown: a registration that is gone is never dead, so runs
    /// still being released are not taken over.
    pub(crate) async fn unregister_liveness<'c, E>(&self, conn: E, registration: Registration) -> Result<()>
    where
        E: Executor<'c, Database = Postgres>,
    {
        const UNREGISTER: &str = concat!(
            "
            WITH gone AS (DELETE FROM leasehold_replica WHERE id = $1)
            SELECT pg_advisory_unlock(",
            liveness_lock_ns!(),
            ", pg_backend_pid())"
        );
        sqlx::query(UNREGISTER).bind(registration.id).execute(conn).await?;
        Ok(())
    }

    /// When the server last started: compared with
    /// [`Registration::server_started`], whether it restarted since.
    pub(crate) async fn server_started<'c, E>(&self, conn: E) -> Result<DateTime<Utc>>
    where
        E: Executor<'c, Database = Postgres>,
    {
        const STARTED: &str = "SELECT pg_postmaster_start_time()";
        Ok(sqlx::query_scalar(STARTED).fetch_one(conn).await?)
    }

    /// Moves the stamps of this replica's runs `(key, fence)` to
    /// `registration`, after the session their stamps name ended while this
    /// process lived. Returns the keys whose run keeps its lease: stamped
    /// with no registration, with this one already, or moved now. A run
    /// whose stamp names a registration that is dead already is not moved —
    /// another replica may take it over at any moment — and the caller
    /// stops it.
    pub(crate) async fn repoint(&self, registration: Registration, runs: &[(&str, i64)]) -> Result<Vec<String>> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<&str> = runs.iter().map(|(key, _)| *key).collect();
        let fences: Vec<i64> = runs.iter().map(|(_, fence)| *fence).collect();
        // $1 new registration id, $2 keys, $3 fences.
        // - `l.fence = t.fence`: only the run's own tenure (a run taken
        //   over has a new fence: nothing to keep).
        // - NOT dead_owner!: the row lock this UPDATE takes orders it
        //   against a claimer's takeover, which tests the same rule on the
        //   row it locked: one of the two wins, never both.
        // - `places` (invariant 11): a moved run's place under its job's
        //   fleet-wide limit moves with it, in the same statement, so the
        //   place is not freed by the old registration's death while the
        //   run goes on (model/fleet-limit.md, finding 3).
        // - `kept`: rows that need no move, as the statement's snapshot
        //   has them.
        const REPOINT: &str = concat!(
            "
            WITH t AS (
                SELECT * FROM unnest($2::text[], $3::int8[]) AS t(key, fence)
            ), moved AS (
                UPDATE leasehold_lease AS l SET owner = $1
                  FROM t
                 WHERE l.key = t.key AND l.fence = t.fence AND l.owner IS NOT NULL AND l.owner <> $1
                   AND NOT ",
            dead_owner!(owner = "l.owner", acquired = "l.acquired_at"),
            "
                RETURNING l.key, l.fence
            ), places AS (
                UPDATE leasehold_run_slot AS s SET owner = $1
                  FROM moved AS m
                 WHERE /* guard:repoint.place */ s.key = m.key AND s.fence = m.fence
            )
            SELECT key FROM moved
            UNION ALL
            SELECT l.key FROM leasehold_lease AS l JOIN t ON l.key = t.key AND l.fence = t.fence
             WHERE l.owner IS NULL OR l.owner = $1"
        );
        // Safe to send twice: a second time, every run moved is `kept`.
        let kept: Vec<String> = crate::connection::run_resending!(&self.conns, |conn| sqlx::query_scalar(REPOINT)
            .bind(registration.id)
            .bind(&keys)
            .bind(&fences)
            .fetch_all(conn))?;
        Ok(kept)
    }
}
