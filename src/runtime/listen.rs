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

use super::liveness::{self, SessionEnd};
use super::state::Shared;
use crate::lease::{CONFIRM_EVERY, KIND_CHANNEL, SESSION_MARK, SLOT_CHANNEL, WAKE_CHANNEL, is_pooler_refusal};

/// How long the probe notification may take to come back.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a liveness confirmation may take before the session counts as
/// silent (and is opened again).
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(5);
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
    let mut failure_told = false;
    loop {
        let outcome = listen(&shared, &own, &mark, &stop).await;
        // A first attempt that did not register is over too: the scheduler
        // waits no longer (its runs fall back to their leases).
        shared.liveness.settle();
        if matches!(outcome, Stopped::Stop) {
            break;
        }
        if shared.set_listening(false) {
            // It worked for a while: a fresh streak.
            failures = 0;
            failure_told = false;
        }
        failures += 1;
        // After a session ends, the runs it vouched for are stopped unless
        // a new registration takes them over within the grace
        // (`liveness::adopt`): the first attempts follow each other
        // closely (0, 100, 200, 400 ms…), then back off.
        let backoff = Duration::from_millis(50)
            .saturating_mul(1 << failures.min(11))
            .min(MAX_RETRY);
        let pause = match outcome {
            Stopped::Stop => break,
            Stopped::SessionEnded if failures == 1 => Duration::ZERO,
            Stopped::SessionEnded => backoff,
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
                if !std::mem::replace(&mut failure_told, true) {
                    tracing::warn!(holder = %shared.holder, %error,
                        "listening for wake-ups failed; polling until it works again");
                }
                backoff
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
    /// The runtime stops.
    Stop,
    /// A transaction pooler is in between: never listen.
    Pooled,
    /// The liveness session ended after working (`liveness::SessionEnd`).
    SessionEnded,
    ProbeLost,
    Failed(sqlx::Error),
}

/// Listens, proves it works, then wakes keys as notifications arrive —
/// until the connection is lost or an error ends it.
async fn listen(shared: &Arc<Shared>, own: &sqlx::PgPool, mark: &str, stop: &CancellationToken) -> Stopped {
    tokio::select! {
        _ = stop.cancelled() => Stopped::Stop,
        outcome = start_listening(shared, own, mark) => match outcome {
            Ok(listener) => serve(shared, listener, stop).await,
            Err(stopped) => stopped,
        },
    }
}

/// Connects, checks the session is its own, listens and proves it works,
/// then registers the session for liveness (invariant 10).
async fn start_listening(shared: &Arc<Shared>, own: &sqlx::PgPool, mark: &str) -> Result<PgListener, Stopped> {
    let mut listener = match PgListener::connect_with(own).await {
        Ok(listener) => listener,
        Err(error) if is_pooler_refusal(&error) => return Err(Stopped::Pooled),
        Err(error) => return Err(Stopped::Failed(error)),
    };
    listener.ignore_pool_close_event(true);
    // A lost connection is reported (`Ok(None)`), never replaced behind our
    // back: the liveness registration belongs to this session.
    listener.eager_reconnect(false);
    match shared.store.is_own_session(&mut listener, mark).await {
        Ok(true) => {}
        Ok(false) => return Err(Stopped::Pooled),
        Err(error) => {
            return Err(Stopped::Failed(sqlx::Error::Protocol(format!(
                "session check failed: {error}"
            ))));
        }
    }
    if let Err(error) = listener.listen_all([WAKE_CHANNEL, KIND_CHANNEL, SLOT_CHANNEL]).await {
        return Err(Stopped::Failed(error));
    }
    let probe = format!("probe:{}:{:016x}", shared.holder, rand::random::<u64>());
    if let Err(error) = shared.store.notify(&probe).await {
        return Err(Stopped::Failed(sqlx::Error::Protocol(format!(
            "could not send the probe notification: {error}"
        ))));
    }
    let deadline = Instant::now() + PROBE_TIMEOUT;
    loop {
        match tokio::time::timeout_at(deadline, listener.try_recv()).await {
            Err(_) => return Err(Stopped::ProbeLost),
            Ok(Err(error)) => return Err(Stopped::Failed(error)),
            Ok(Ok(None)) => return Err(Stopped::ProbeLost),
            Ok(Ok(Some(n))) if n.payload() == probe => break,
            Ok(Ok(Some(n))) => heard(shared, &n),
        }
    }
    #[cfg(feature = "test-util")]
    while shared.faults.liveness_frozen() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let sent = Instant::now();
    match shared.store.register_liveness(&mut listener, &shared.holder).await {
        Ok(registration) => {
            shared.liveness.confirmed(registration, sent);
            // Claims stamp from here: the scheduler's first may go.
            shared.liveness.settle();
            liveness::adopt(shared, registration).await;
        }
        Err(error) => {
            // Listening works without it: runs then fall back to their
            // leases, as behind a pooler.
            tracing::warn!(holder = %shared.holder, %error,
                "could not register this replica's liveness session; a crash of this replica hands its runs \
                 over when their leases expire");
            shared.liveness.settle();
        }
    }
    shared.set_listening(true);
    // What was notified before this LISTEN (at start, or while the
    // connection was down) reached no one: a poll now finds it, rather than
    // the next one, a poll interval away.
    shared.poll_soon();
    tracing::debug!(holder = %shared.holder, "listening for wake-ups");
    Ok(listener)
}

/// Wakes keys as notifications arrive and confirms the liveness
/// registration every `CONFIRM_EVERY`, until the connection is lost, an
/// error ends it, or the runtime stops (which unregisters first: a
/// registration that is gone is never taken for dead).
async fn serve(shared: &Arc<Shared>, mut listener: PgListener, stop: &CancellationToken) -> Stopped {
    let mut next = Instant::now() + CONFIRM_EVERY;
    loop {
        let heard_or_due = tokio::select! {
            _ = stop.cancelled() => {
                if let Some(registration) = shared.liveness.current() {
                    let _ = tokio::time::timeout(CONFIRM_TIMEOUT,
                        shared.store.unregister_liveness(&mut listener, registration)).await;
                }
                return Stopped::Stop;
            }
            // `try_recv` is cancel-safe: a message half read stays buffered.
            heard = tokio::time::timeout_at(next, listener.try_recv()) => heard,
        };
        match heard_or_due {
            Ok(Ok(Some(notification))) => heard(shared, &notification),
            // The connection dropped (notifications may be lost): the
            // scheduler's next poll covers the gap; start over.
            Ok(Ok(None)) => {
                liveness::session_ended(shared, SessionEnd::Failed);
                shared.wake_scheduler();
                return Stopped::SessionEnded;
            }
            Ok(Err(error)) => {
                liveness::session_ended(shared, SessionEnd::Failed);
                tracing::warn!(holder = %shared.holder, %error, "the listener's session failed; listening again");
                return Stopped::SessionEnded;
            }
            Err(_confirm_due) => {
                next = Instant::now() + CONFIRM_EVERY;
                let Some(registration) = shared.liveness.current() else {
                    continue;
                };
                #[cfg(feature = "test-util")]
                if shared.faults.liveness_frozen() {
                    continue;
                }
                let sent = Instant::now();
                let confirmed = tokio::time::timeout(
                    CONFIRM_TIMEOUT,
                    shared.store.confirm_liveness(&mut listener, registration),
                )
                .await;
                match confirmed {
                    Ok(Ok(c)) if c.still_registered => {
                        shared.liveness.confirmed(registration, sent);
                        if c.woken > 0 {
                            tracing::debug!(holder = %shared.holder, keys = c.woken,
                                "a replica's liveness session ended: woke the keys of its runs");
                        }
                    }
                    Ok(Ok(_)) => {
                        liveness::session_ended(shared, SessionEnd::Unregistered);
                        return Stopped::SessionEnded;
                    }
                    Ok(Err(error)) => {
                        liveness::session_ended(shared, SessionEnd::Failed);
                        tracing::warn!(holder = %shared.holder, %error, "the liveness session failed; registering again");
                        return Stopped::SessionEnded;
                    }
                    Err(_) => {
                        liveness::session_ended(shared, SessionEnd::Silent);
                        return Stopped::SessionEnded;
                    }
                }
            }
        }
    }
}

/// A notification: a key's wake-up, a change of a kind's keys (the
/// scheduler syncs at once: a removed key stops within milliseconds), or a
/// place freed under a job's fleet-wide limit (its keys held back here are
/// proposed at once).
fn heard(shared: &Shared, notification: &sqlx::postgres::PgNotification) {
    if notification.channel() == KIND_CHANNEL {
        shared.poll_soon();
    } else if notification.channel() == SLOT_CHANNEL {
        if shared.limits.place_freed(notification.payload()) {
            shared.wake_scheduler();
        }
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
