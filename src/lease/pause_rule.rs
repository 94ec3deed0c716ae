//! The pause rule (invariant 8, docs/design.md §4), written once for every
//! statement that applies it: a pause covers a lease row when it names the
//! row's key (scope `key`) or the row's job (scope `job`).
//!
//! The claims refuse a row a pause covers (and, having lost, say whether
//! one does: `lost_claim_answer!`), the renewal reports a covering pause
//! that cancels, the trigger reports one, and the operators' reads
//! count and show them. Each macro expands to a string literal, so every
//! statement stays one `&'static str` constant, assembled with `concat!`:
//! a change to the rule (a new scope, say) is made here once, and no
//! statement can be left applying the old one.
//!
//! Arguments are SQL text: `key` an expression for the row's key, `jobs` a
//! list of expressions or a subquery for its job name. `NULL` stands for a
//! row not written yet, which has no job: `p.name IN (NULL)` is never true.

/// `pause` (a `leasehold_pause` row's alias) covers the lease row whose key
/// is `key` and whose job is one of `jobs`.
macro_rules! pause_covers {
    (pause = $p:literal, key = $key:literal, jobs = $jobs:literal) => {
        concat!(
            "((",
            $p,
            /* guard:pause_rule.key */ ".scope = 'key' AND ",
            $p,
            ".name = ",
            $key,
            ") OR (",
            $p,
            /* guard:pause_rule.job */ ".scope = 'job' AND ",
            $p,
            ".name IN (",
            $jobs,
            ")))"
        )
    };
}

/// Some pause covers the row (`key`, `jobs`); with `cancelling`, some pause
/// that also cancels the run in progress. An SQL boolean expression.
///
/// With `if_any`, the same rule behind a check that the pause table has a
/// row at all: an uncorrelated `EXISTS`, which PostgreSQL evaluates once per
/// statement (an `InitPlan`) and, false, short-circuits the `AND` before
/// the per-row probe. For statements that apply the rule to many rows (the
/// batch claim): with no pause anywhere, the usual case, they probe
/// `leasehold_pause_pkey` not at all instead of twice per row. The rule
/// itself is the same.
macro_rules! paused {
    (key = $key:literal, jobs = $jobs:literal) => {
        concat!(
            "EXISTS (SELECT 1 FROM leasehold_pause AS p WHERE ",
            pause_covers!(pause = "p", key = $key, jobs = $jobs),
            ")"
        )
    };
    (if_any, key = $key:literal, jobs = $jobs:literal) => {
        concat!(
            "(EXISTS (SELECT 1 FROM leasehold_pause) AND ",
            paused!(key = $key, jobs = $jobs),
            ")"
        )
    };
    (cancelling, key = $key:literal, jobs = $jobs:literal) => {
        concat!(
            "EXISTS (SELECT 1 FROM leasehold_pause AS p WHERE p.cancel AND ",
            pause_covers!(pause = "p", key = $key, jobs = $jobs),
            ")"
        )
    };
}

/// The end of both claim statements (`claim`, `claim_run`), after their
/// CTE `claimed` (the row the claim took, if any): that row with
/// `acquired`, or — the claim lost — the key's current row, with whether
/// a pause covers it, so the caller learns who holds the key, or that it
/// is paused, in the same round trip. Not a guard: it reads, and decides
/// nothing; written once so the two claims cannot answer a loss
/// differently.
macro_rules! lost_claim_answer {
    () => {
        concat!(
            ", paused AS (
                SELECT ",
            paused!(key = "$1", jobs = "SELECT job_name FROM leasehold_lease WHERE key = $1"),
            " AS paused
            )
            SELECT true AS acquired, false AS paused, c.*, clock_timestamp() AS server_now FROM claimed c
            UNION ALL
            SELECT false, paused.paused, l.*, clock_timestamp() FROM leasehold_lease l, paused
             WHERE l.key = $1 AND NOT EXISTS (SELECT 1 FROM claimed)"
        )
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_rule_reads_as_sql() {
        assert_eq!(
            paused!(key = "l.key", jobs = "l.job_name, t.job"),
            "EXISTS (SELECT 1 FROM leasehold_pause AS p WHERE ((p.scope = 'key' AND p.name = l.key) \
             OR (p.scope = 'job' AND p.name IN (l.job_name, t.job))))"
        );
        assert_eq!(
            paused!(cancelling, key = "$1", jobs = "NULL"),
            "EXISTS (SELECT 1 FROM leasehold_pause AS p WHERE p.cancel AND ((p.scope = 'key' AND p.name = $1) \
             OR (p.scope = 'job' AND p.name IN (NULL))))"
        );
        assert_eq!(
            paused!(if_any, key = "l.key", jobs = "l.job_name"),
            "(EXISTS (SELECT 1 FROM leasehold_pause) AND EXISTS (SELECT 1 FROM leasehold_pause AS p WHERE \
             ((p.scope = 'key' AND p.name = l.key) OR (p.scope = 'job' AND p.name IN (l.job_name)))))"
        );
        assert_eq!(
            pause_covers!(pause = "gone", key = "l.key", jobs = "l.job_name"),
            "((gone.scope = 'key' AND gone.name = l.key) OR (gone.scope = 'job' AND gone.name IN (l.job_name)))"
        );
    }
}
