//! The fleet-scale scheduler: batch claims under contention, keys added and
//! removed at run time, wake-ups with and without `LISTEN`, the concurrency
//! limit, forgetting keys, and what an idle runtime costs.

mod batch_claim;
mod concurrency_limit;
mod cost;
mod forget;
mod membership;
mod wakeups;
