//! Which plan PostgreSQL runs leasehold's batch statements with: their
//! generic plan, settled once per connection, rather than a plan made for
//! each execution's values.
//!
//! PostgreSQL plans each of a prepared statement's first five executions for
//! its parameters' values (a "custom plan"), then compares: it keeps its
//! generic plan for good if that is estimated cheaper than the custom plans
//! were on average, and otherwise plans every execution again. A custom
//! plan knows each array parameter's length, the generic plan assumes 10
//! items. So a batch of one or a few keys — every run of a replica under
//! capacity — makes the custom plans look cheap, and each claim was planned
//! afresh: about 1 ms of server CPU per statement of this size, several
//! times what executing it costs (docs/benchmarks/plans-2026-12-07/). At the
//! throughput ceiling batches are large and the generic plan wins anyway.
//!
//! [`settle`] plans a statement five times for a batch of 100 items without
//! executing it (`EXPLAIN EXECUTE`). Those custom plans are estimated dearer
//! than the generic one, so from its next execution on the statement runs
//! its generic plan, which does not depend on the batch: each item is looked
//! up by key in a nested loop, whatever their number. No session setting is
//! changed (`plan_cache_mode` would do it, but a connection may go through a
//! transaction pooler, design.md §8), and only the given statement's plans
//! are touched, so it is safe on the service's connections too.
//!
//! Invariants:
//! 1. Nothing is executed: `EXPLAIN` without `ANALYZE` plans only.
//! 2. Only the prepared statements whose text is the given one are planned;
//!    a service's statements on a shared connection are left alone.
//! 3. Best effort: an error (a statement not prepared, a pooler that
//!    refuses) leaves the plans to PostgreSQL's own choice, as before.

use sha2::{Digest, Sha256};
use sqlx::{Connection, Executor, PgConnection};

/// Plans each of `statements`, as prepared on `conn`, five times for a
/// batch of 100 items without executing it, so that from then on it runs
/// its generic plan. One round trip for all of them, which first performs
/// `first` if given (its error ignored, rolled back alone): a connection
/// that opens through a slow link pays one round trip for both. A text not
/// prepared on `conn` is passed over. Each statement is found by its text's
/// SHA-256: the block does not carry the texts, so it is not counted as one
/// of them by a `pg_stat_statements` query that looks for a piece of it.
///
/// - Five: the custom plans PostgreSQL makes of a prepared statement before
///   it considers its generic plan (`choose_custom_plan`, plancache.c).
/// - A batch of 100: each array parameter is 100 copies of a value, so its
///   custom plans are estimated dearer than the generic plan.
/// - Values, not NULLs: a NULL holder or limit would let the planner fold
///   most of a statement away and make its custom plans look cheap. A number
///   is 100, a time the epoch, a boolean false, text empty.
/// - The arguments are built from the statement's parameter types
///   (`pg_prepared_statements`), so no statement's parameters are written a
///   second time here. A parameter of a type with no value above (an
///   interval, say) fails the block, and the plans are left to PostgreSQL's
///   choice: `plans::an_owned_connection_runs_the_statements_of_every_run_on_their_generic_plans`
///   then fails.
pub(crate) async fn settle(conn: &mut PgConnection, statements: &[&str], first: Option<&str>) -> sqlx::Result<()> {
    let digests: Vec<String> = statements
        .iter()
        .map(|statement| {
            let hex: String = Sha256::digest(statement.as_bytes())
                .iter()
                .map(|byte| format!("{byte:02x}"))
                .collect();
            format!("'\\x{hex}'::bytea")
        })
        .collect();
    let digests = digests.join(", ");
    let first = match first {
        Some(query) => format!("BEGIN PERFORM {query}; EXCEPTION WHEN OTHERS THEN NULL; END;"),
        None => String::new(),
    };
    let block = format!(
        "
        DO $settle$
        DECLARE
            prepared record;
            arguments text;
        BEGIN
            {first}
            FOR prepared IN SELECT name, parameter_types FROM pg_prepared_statements
                             WHERE sha256(convert_to(statement, 'UTF8')) IN ({digests}) LOOP
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
        $settle$"
    );
    conn.execute(sqlx::AssertSqlSafe(block)).await.map(drop)
}

/// After `statement` ran on `conn`: if sqlx prepared it there just now (the
/// connection's statement cache grew from `cached`), settles its plans;
/// errors are logged and ignored (invariant 3).
pub(crate) async fn settle_if_new(conn: &mut PgConnection, cached: usize, statement: &str) {
    if conn.cached_statements_size() > cached
        && let Err(error) = settle(conn, &[statement], None).await
    {
        tracing::debug!(%error, "a statement's plans were left to PostgreSQL's choice on this connection");
    }
}
