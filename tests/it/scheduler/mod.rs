//! The fleet-scale scheduler: batch claims under contention, keys added and
//! removed at run time, wake-ups with and without `LISTEN`, the concurrency
//! limits (per replica and fleet-wide), forgetting keys, what an idle runtime costs, and shutting down
//! while keys keep falling due.

mod batch_claim;
mod concurrency_limit;
mod cost;
mod fleet_limit;
mod forget;
mod membership;
mod priority;
mod schedule_change;
mod shutdown_under_load;
mod wakeups;
