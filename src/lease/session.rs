//! What a connection of leasehold's own does once, as it opens: the work
//! a session otherwise does inside its first claim.
//!
//! A session's first fence is dear: `leasehold_next_fence()` then checks
//! the server's WAL timeline (`leasehold_first_fence_of_session()`, two
//! PL/pgSQL functions compiled and planned in that backend, and the
//! `leasehold_timeline` row read), about 4 ms against 0.2 ms for every
//! later one (measured with `psql \timing` on PostgreSQL 15). On the
//! runtime's own connections that cost would land on the first claim a
//! new connection sends — the takeover in a graceful handover, or the
//! first run after a reconnect — so it is paid here instead, off the path
//! of any run.
//!
//! The same goes for the statements every run sends: the first execution
//! of a statement on a connection first parses it (a round trip of its own
//! through sqlx's statement cache, and over a millisecond of the server's
//! parse and analysis for statements of this size), so they are prepared
//! here, and a run's claim and release on a fresh connection pay only
//! their execution.
//!
//! And their plans. PostgreSQL plans each of a prepared statement's first
//! five executions for its parameters' values (a "custom plan"), then
//! compares: it keeps its generic plan for good if that is estimated
//! cheaper than the custom plans were on average, and otherwise plans
//! every execution again. A batch of one or a few keys — every run of a
//! replica under capacity — makes the custom plans look cheap, so each
//! claim was planned afresh: about 0.6 ms of server CPU per statement of
//! this size, several times what executing it costs
//! (docs/benchmarks/plans-2026-12-07/). No session setting is changed to
//! avoid that (a connection may go through a transaction pooler, design.md
//! §8): each statement is planned here five times for a batch of 100
//! items, without being executed (`settle_plans`). Those custom plans are
//! estimated dearer than the generic one, so from its first execution on
//! the statement runs its generic plan, which does not depend on the
//! batch: each item is looked up by key in a nested loop, whatever their
//! number.

use sqlx::{Connection, Executor, PgConnection};

use super::LeaseStore;

/// The statements on the path of every run: its claim (without, then
/// with, the fleet-wide limits' steps), its heartbeat, its release.
/// Prepared into the connection's statement cache, where the queries that
/// run them find them by their text, and their plans settled.
const EVERY_RUN: [&str; 4] = [
    LeaseStore::CLAIM_DUE_UNLIMITED,
    LeaseStore::RENEW_MANY,
    LeaseStore::FINISH_MANY,
    LeaseStore::CLAIM_DUE,
];

/// Draws one fence and drops it, so the session's timeline check is done,
/// prepares the statements of every run, and settles their plans.
///
/// The fence is wasted, which the lease invariants allow (fences must only
/// grow, and a sequence never repeats a value): one per connection opened,
/// and a connection lives for up to half an hour. Errors are ignored, and
/// leave the check to the session's first claim as before: a server in
/// recovery draws no fence (nor can a session there check its timeline: it
/// checks at its first fence once promoted), and `LeaseStore::connect` does
/// not check that the schema exists, so a store may open before it does.
pub(crate) async fn prepare(conn: &mut PgConnection) {
    const FIRST_FENCE: &str = "SELECT leasehold_next_fence()";
    if let Err(error) = conn.execute(FIRST_FENCE).await {
        tracing::debug!(%error, "a new connection left its timeline check to its first claim");
    }
    for statement in EVERY_RUN {
        let cached = conn.cached_statements_size();
        // Before the schema exists this fails, and the first execution
        // prepares the statement as it would have.
        if let Err(error) = conn.prepare(sqlx::SqlStr::from_static(statement)).await {
            tracing::debug!(%error, "a new connection left a statement to be prepared by its first use");
            return;
        }
        // With the statement cache off (`statement_cache_capacity(0)`) a
        // query would not find it: nothing to gain, and what is prepared
        // stays on the server for the connection's life (sqlx offers no
        // way to close it), so stop after this first one.
        if conn.cached_statements_size() == cached {
            return;
        }
    }
    if let Err(error) = settle_plans(conn).await {
        tracing::debug!(%error, "a new connection left the plans of its statements to their first uses");
    }
}

/// Plans every statement prepared on the connection — the statements of
/// every run, just prepared — five times for a batch of 100 items, without
/// executing them (`EXPLAIN EXECUTE`), so that from then on each runs its
/// generic plan. One round trip, and side-effect free: `EXPLAIN` without
/// `ANALYZE` executes nothing.
///
/// - Five: the custom plans PostgreSQL makes of a prepared statement before
///   it considers its generic plan (`choose_custom_plan`, plancache.c).
/// - A batch of 100: each array parameter is 100 copies of a value, and
///   its custom plans are estimated dearer than the generic plan, which
///   counts 10 items for an array parameter.
/// - Values, not NULLs: a NULL holder or limit would let the planner fold
///   most of a statement away, and make its custom plans look cheap. A
///   number is 100, a time the epoch, a boolean false, text empty (no key
///   is empty: nothing is looked up that exists, not that it matters to a
///   plan).
/// - The arguments are built from the statements' parameter types
///   (`pg_prepared_statements`), so no statement's parameters are written
///   a second time here. A parameter of a type with no value above (an
///   interval, say) fails the block: the plans are then left to the
///   statements' first uses, and
///   `lease::an_owned_connection_runs_the_statements_of_every_run_on_their_generic_plans`
///   fails.
async fn settle_plans(conn: &mut PgConnection) -> sqlx::Result<()> {
    const SETTLE: &str = "
        DO $settle$
        DECLARE
            prepared record;
            arguments text;
        BEGIN
            FOR prepared IN SELECT name, parameter_types FROM pg_prepared_statements LOOP
                SELECT string_agg(CASE WHEN a.typcategory = 'A'
                                       THEN format('array_fill(%s, ARRAY[100])', v.value)
                                       ELSE v.value END, ', ' ORDER BY p.n)
                  INTO arguments
                  FROM unnest(prepared.parameter_types) WITH ORDINALITY AS p(type, n)
                  JOIN pg_type AS a ON a.oid = p.type
                  JOIN pg_type AS t ON t.oid = CASE WHEN a.typcategory = 'A' THEN a.typelem ELSE a.oid END,
                       LATERAL (SELECT format('%L::%s', CASE t.typcategory WHEN 'N' THEN '100' WHEN 'D' THEN 'epoch'
                                                                           WHEN 'B' THEN 'false' ELSE '' END,
                                              t.oid::regtype) AS value) AS v;
                FOR i IN 1..5 LOOP
                    EXECUTE format('EXPLAIN EXECUTE %I%s', prepared.name,
                                   CASE WHEN arguments IS NULL THEN '' ELSE '(' || arguments || ')' END);
                END LOOP;
            END LOOP;
        END
        $settle$";
    conn.execute(SETTLE).await.map(drop)
}
