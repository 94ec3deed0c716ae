//! The listener service: `LISTEN leasehold` on a connection of its own, so a
//! released, triggered or newly due key starts on some replica within
//! milliseconds instead of at the next poll.
//!
//! - **Its own connection**, opened from the pool's connect options — never
//!   one of the pooled connections the runtime's statements run on (the
//!   service's, or the runtime's own 2). Cost: one connection per replica
//!   while listening.
//! - **Never through a transaction pooler.** Behind PgBouncer in
//!   transaction (or statement) mode, `LISTEN` is not just useless, it is
//!   harmful: the server connection it ran on returns to PgBouncer's pool
//!   still listening, and the next client given it — the service itself —
//!   fails with "unexpected message: NotificationResponse". So the
//!   listener's connection carries a mark in its startup options
//!   (`lease::SESSION_MARK`), which a pooler refuses or drops, and before
//!   `LISTEN` the listener checks that its connection is a session of its
//!   own (`LeaseStore::is_own_session`, side-effect free); if not, or if a
//!   pooler refused the mark, it never listens and the runtime polls
//!   (logged once).
//! - **Proved before trusted**: after `LISTEN`, it sends itself a probe
//!   through the runtime's statement pool and waits for it; if it never arrives, the
//!   runtime keeps polling. Off entirely with `RuntimeBuilder::listen(false)`.
//! - **Lossy by nature, so never relied on**: a dropped connection loses
//!   notifications; the listener reconnects (with back-off) and, once it
//!   listens again, has the scheduler poll at once: that poll finds
//!   whatever became due meanwhile. While it is
//!   down, `Shared::listening` is false and the scheduler re-checks held
//!   keys at least every poll interval.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPoolOptions};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::state::Shared;
use crate::lease::{KIND_CHANNEL, SESSION_MARK, WAKE_CHANNEL, is_pooler_refusal};

/// How long the probe notification may take to come back.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest pause between attempts to (re)start listening.
const MAX_RETRY: Duration = Duration::from_secs(60);

/// Runs until `stop` is cancelled.
pub(crate) async fn run(shared: Arc<Shared>, stop: CancellationToken) {
    // A pool of at most one connection, only to get PgListener's
    // reconnection; it shares nothing with the service's pool. Its
    // connections carry this runtime's session mark.
    let mark = format!("{:016x}", rand::random::<u64>());
    let options = (*shared.store.pool().connect_options())
        .clone()
        .options([(SESSION_MARK, &mark)]);
    let own = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .max_lifetime(None)
        .idle_timeout(None)
        .acquire_timeout(Duration::from_secs(10))
        .connect_lazy_with(options);
    let mut failures: u32 = 0;
    loop {
        let outcome = tokio::select! {
            _ = stop.cancelled() => break,
            outcome = listen(&shared, &own, &mark) => outcome,
        };
        if shared.set_listening(false) {
            failures = 0; // it worked for a while: a fresh streak
        }
        failures += 1;
        let pause = match outcome {
            Stopped::Pooled => {
                #[cfg(feature = "test-util")]
                shared.faults.pooler_detected();
                tracing::warn!(holder = %shared.holder,
                    "the database connection is not a session of its own (PgBouncer in transaction mode?): \
                     LISTEN/NOTIFY wake-ups are off, the runtime polls every poll interval; set \
                     RuntimeBuilder::listen(false) to skip this check");
                break;
            }
            Stopped::ProbeLost => {
                if failures == 1 {
                    tracing::warn!(holder = %shared.holder,
                        "LISTEN/NOTIFY does not reach this replica (is the pool behind PgBouncer in transaction \
                         mode?): polling every poll interval instead; set RuntimeBuilder::listen(false) to skip \
                         the check");
                }
                MAX_RETRY * 5
            }
            Stopped::Failed(error) => {
                if failures == 1 {
                    tracing::warn!(holder = %shared.holder, %error,
                        "listening for wake-ups failed; polling until it works again");
                }
                Duration::from_millis(500)
                    .saturating_mul(1 << failures.min(7))
                    .min(MAX_RETRY)
            }
        };
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(pause) => {}
        }
    }
    shared.set_listening(false);
    own.close().await;
}

enum Stopped {
    /// A transaction pooler is in between: never listen.
    Pooled,
    ProbeLost,
    Failed(sqlx::Error),
}

/// Listens, proves it works, then wakes keys as notifications arrive —
/// until the connection is lost or an error ends it.
async fn listen(shared: &Shared, own: &sqlx::PgPool, mark: &str) -> Stopped {
    let mut listener = match PgListener::connect_with(own).await {
        Ok(listener) => listener,
        Err(error) if is_pooler_refusal(&error) => return Stopped::Pooled,
        Err(error) => return Stopped::Failed(error),
    };
    listener.ignore_pool_close_event(true);
    match shared.store.is_own_session(&mut listener, mark).await {
        Ok(true) => {}
        Ok(false) => return Stopped::Pooled,
        Err(error) => return Stopped::Failed(sqlx::Error::Protocol(format!("session check failed: {error}"))),
    }
    if let Err(error) = listener.listen_all([WAKE_CHANNEL, KIND_CHANNEL]).await {
        return Stopped::Failed(error);
    }
    let probe = format!("probe:{}:{:016x}", shared.holder, rand::random::<u64>());
    if let Err(error) = shared.store.notify(&probe).await {
        return Stopped::Failed(sqlx::Error::Protocol(format!(
            "could not send the probe notification: {error}"
        )));
    }
    let deadline = Instant::now() + PROBE_TIMEOUT;
    loop {
        match tokio::time::timeout_at(deadline, listener.try_recv()).await {
            Err(_) => return Stopped::ProbeLost,
            Ok(Err(error)) => return Stopped::Failed(error),
            Ok(Ok(None)) => return Stopped::ProbeLost,
            Ok(Ok(Some(n))) if n.payload() == probe => break,
            Ok(Ok(Some(n))) => heard(shared, &n),
        }
    }
    shared.set_listening(true);
    // What was notified before this LISTEN (at start, or while the
    // connection was down) reached no one: a poll now finds it, rather than
    // the next one, a poll interval away.
    shared.poll_soon();
    tracing::debug!(holder = %shared.holder, "listening for wake-ups");
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => heard(shared, &notification),
            // The connection dropped (notifications may be lost): the
            // scheduler's next poll covers the gap; start over.
            Ok(None) => {
                shared.wake_scheduler();
                return Stopped::Failed(sqlx::Error::Protocol("listener connection lost".into()));
            }
            Err(error) => return Stopped::Failed(error),
        }
    }
}

/// A notification: a key's wake-up, or a change of a kind's keys (the
/// scheduler syncs at once: a removed key stops within milliseconds).
fn heard(shared: &Shared, notification: &sqlx::postgres::PgNotification) {
    if notification.channel() == KIND_CHANNEL {
        shared.poll_soon();
    } else {
        wake(shared, notification.payload());
    }
}

/// A key may be claimable now: if it is registered here, claim it soon.
fn wake(shared: &Shared, key: &str) {
    #[cfg(feature = "test-util")]
    shared.faults.notification_heard();
    shared.wake_key(key);
}
