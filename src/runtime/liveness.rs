//! What the runtime does with its liveness registration (invariant 10),
//! beside the listener that keeps it: after registering, keep the runs
//! stamped with an older registration; when the session fails, stop the
//! runs no one can vouch for before another replica may take them over.
//!
//! The rule it keeps: a run stamped with a registration whose session
//! ended while this process lived is stopped by
//! `confirmed + GRACE − LIVENESS_MARGIN` (the local instant the latest
//! confirmation was sent, plus the grace, less a margin) unless its stamp
//! was moved to a live registration before then, or the server says it
//! restarted (a new start time, or it refuses connections as it starts or
//! shuts down) — then no one can take it over early. A server that does
//! not answer in time may be up: the run is stopped. No other replica takes
//! it over before the server's `gone_seen_at + grace`, which is later
//! (the session was seen gone after its last confirmation).
//! Silence — a confirmation that gets no answer — stops nothing: the
//! session may well be alive on the server (a partition), its lock held,
//! and the lease is the bound, as without a registration.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::state::Shared;
use crate::cancel::CancelReason;
use crate::connection::bounded;
use crate::lease::{GRACE, Registration};

/// Taken off the grace for the local stop: covers the time a cancelled
/// run takes to notice, and clock-rate error over one second.
const LIVENESS_MARGIN: Duration = Duration::from_millis(250);

/// How a liveness session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionEnd {
    /// The connection failed or was closed: the session may be gone on
    /// the server, its lock free.
    Failed,
    /// No answer in time: the session may be alive on the server
    /// (partition, a busy server). Stops nothing.
    Silent,
    /// The registration's row is gone (a server crash emptied the table, or
    /// a cleanup after an hour): runs stamped with it are never taken over
    /// early. Stops nothing.
    Unregistered,
}

/// The liveness session ended as `end`: claims stop stamping runs, and
/// after a failure, the runs stamped with the registration are stopped at
/// the local deadline unless a new registration took them over first.
pub(crate) fn session_ended(shared: &Arc<Shared>, end: SessionEnd) {
    let Some((registration, confirmed)) = shared.liveness.failed() else {
        return;
    };
    if end != SessionEnd::Failed {
        return;
    }
    let deadline = confirmed + GRACE.saturating_sub(LIVENESS_MARGIN);
    let shared = shared.clone();
    tokio::spawn(async move {
        // Whether the server restarted, asked at once on a connection of
        // its own (a pooled one may have been ended by the same event, and
        // the pool retries a refused connection instead of saying so), and
        // again until the stop is due.
        let stop = loop {
            match tokio::time::timeout_at(deadline, server_started(&shared)).await {
                Ok(Ok(started)) => break started == registration.server_started,
                Ok(Err(error)) if server_down(&error) => break false,
                Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(20)).await,
                // No answer in time: the server may be up and our session
                // ended some other way. Stop.
                Err(_) => break true,
            }
            if Instant::now() >= deadline {
                break true;
            }
        };
        if stop {
            tokio::time::sleep_until(deadline).await;
            stop_stamped(&shared, registration);
        }
    });
}

/// When the server last started, asked on a new connection of the pool's
/// settings, closed after.
async fn server_started(shared: &Shared) -> crate::Result<chrono::DateTime<chrono::Utc>> {
    use sqlx::Connection;
    let options = (*shared.store.pool().connect_options()).clone();
    let mut conn = sqlx::PgConnection::connect_with(&options).await?;
    let started = shared.store.server_started(&mut conn).await;
    let _ = conn.close().await;
    started
}

/// Whether `error` says the server is not accepting connections (refused,
/// starting up or shutting down): it is restarting, or gone, and no one can
/// take a run over through it now; once it is back, fact 2 of invariant 10
/// holds for every registration made before.
fn server_down(error: &crate::Error) -> bool {
    let crate::Error::Database(error) = error else {
        return false;
    };
    match error {
        // Refused over TCP; no socket file over a Unix socket.
        sqlx::Error::Io(io) => matches!(
            io.kind(),
            std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
        ),
        sqlx::Error::Database(db) => db.code().as_deref() == Some("57P03"),
        _ => false,
    }
}

/// Stops every run still stamped with `registration`.
fn stop_stamped(shared: &Shared, registration: Registration) {
    let stamped: Vec<_> = shared
        .held()
        .into_iter()
        .filter(|t| t.owner() == Some(registration.id))
        .collect();
    for tenure in stamped {
        if tenure.owner() == Some(registration.id) && tenure.cancel(CancelReason::Deadline) {
            tracing::warn!(job = %tenure.job, key = %tenure.key, fence = tenure.fence,
                "this replica's liveness session ended and the run could not be handed to a new one \
                 in time: stopping it before another replica may take it over");
        }
    }
}

/// After registering `registration`: moves the stamps of this runtime's
/// runs stamped with an older registration to it; runs whose stamp could
/// not be moved (their old registration is dead already, or their tenure
/// ended) are stopped.
pub(crate) async fn adopt(shared: &Shared, registration: Registration) {
    let stale: Vec<_> = shared
        .held()
        .into_iter()
        .filter(|t| t.owner().is_some_and(|id| id != registration.id))
        .collect();
    if stale.is_empty() {
        return;
    }
    let runs: Vec<(&str, i64)> = stale.iter().map(|t| (t.key.as_str(), t.fence)).collect();
    match bounded(GRACE, "liveness re-point", shared.store.repoint(registration, &runs)).await {
        Ok(kept) => {
            for tenure in &stale {
                if kept.iter().any(|k| *k == tenure.key) {
                    tenure.set_owner(Some(registration.id));
                } else if tenure.cancel(CancelReason::Deadline) {
                    tracing::warn!(job = %tenure.job, key = %tenure.key, fence = tenure.fence,
                        "this replica's liveness session ended for longer than its grace: stopping the run, \
                         which another replica may take over");
                }
            }
        }
        Err(error) => {
            // The stops armed when the session failed still apply.
            tracing::warn!(holder = %shared.holder, %error,
                "could not move this replica's runs to its new liveness session");
        }
    }
}
