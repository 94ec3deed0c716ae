//! Integration tests, one binary (each test binary links sqlx and tokio
//! again). Every test runs against a real PostgreSQL: `DATABASE_URL` if set,
//! otherwise a throwaway cluster (see `leasehold-testkit`).

mod support;

mod console;
mod derive;
mod exit;
mod failover;
mod fenced;
mod fleet;
mod frozen_holder;
mod isolation;
mod lease;
mod metrics;
mod migrate;
mod operators;
mod pgbouncer;
mod plans;
mod record;
mod runtime;
mod scheduler;
mod takeover;
mod timeout;
mod traces;
