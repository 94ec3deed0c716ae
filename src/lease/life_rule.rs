//! The rule that tells which life of its key a run belongs to, written
//! once and expanded (with `concat!`) in every statement that reads run
//! history: `history`, `list`'s latest runs and `recent_runs` (schema v10,
//! docs/design.md §10).
//!
//! A key of a job kind lives from its add to its removal; removed and
//! added again, it starts a new life. A run belongs to an *earlier life*
//! when it was claimed (`started_at`, the server clock at its claim)
//! before the stored key's `created_at` (the add that began the key's
//! current life), or — the key removed and not added again — before its
//! removal (`leasehold_key_life.removed_at`). A key that never had a
//! stored key nor a removal (a static job's key) has one life.

/// `earlier_life!(run = "r")`: the SQL boolean for the run row aliased `r`.
macro_rules! earlier_life {
    (run = $run:literal) => {
        concat!(
            "coalesce(",
            $run,
            ".started_at < coalesce((SELECT k.created_at FROM leasehold_key AS k WHERE k.key = ",
            $run,
            ".key), (SELECT d.removed_at FROM leasehold_key_life AS d WHERE d.key = ",
            $run,
            ".key)), false)"
        )
    };
}
