//! The wake-up channel: its name, the listener's session check and probe.

use super::LeaseStore;
use crate::connection;
use crate::error::Result;

/// The `LISTEN`/`NOTIFY` channel of wake-ups. The payload is a key that may
/// be claimable now. Every statement that notifies binds this constant, so
/// the name lives here only.
pub(crate) const WAKE_CHANNEL: &str = "leasehold";

impl LeaseStore {
    /// Whether `listener` is a session of its own on the server, as `LISTEN`
    /// needs — false behind a transaction-pooling proxy (PgBouncer in
    /// transaction or statement mode), where `LISTEN` must never be sent:
    /// the server connection it ran on goes back to the proxy's pool still
    /// listening, and the *service's* next query on it fails with an
    /// unexpected notification.
    ///
    /// Side-effect free: while one of this store's pooled connections holds
    /// a transaction open (so a proxy cannot hand its backend to anyone
    /// else), the listener's backend pid is read before and after. A real
    /// session keeps its pid and never shares it; through a transaction
    /// pooler, the pooled transaction usually lands on the backend the
    /// listener just used (PgBouncer hands out the most recently used
    /// server connection first), or the listener moves. A round is fooled
    /// when another client takes that backend in between and gives it back
    /// before the listener's second read, which a busy fleet starting up
    /// does now and then; it must be fooled in every one of
    /// `SESSION_CHECK_ROUNDS` rounds (a few milliseconds in all) before the
    /// listener trusts its session.
    pub(crate) async fn is_own_session(&self, listener: &mut sqlx::postgres::PgListener) -> Result<bool> {
        const PID: &str = "SELECT pg_backend_pid()";
        const SESSION_CHECK_ROUNDS: usize = 8;
        for _ in 0..SESSION_CHECK_ROUNDS {
            let before: i32 = sqlx::query_scalar(PID).fetch_one(&mut *listener).await?;
            let mut tx = connection::begin(&self.conns).await?;
            let pooled: i32 = sqlx::query_scalar(PID).fetch_one(&mut *tx).await?;
            let after: i32 = sqlx::query_scalar(PID).fetch_one(&mut *listener).await?;
            tx.rollback().await?;
            if pooled == before || after != before {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Sends `payload` on the wake-up channel (the listener's probe).
    pub(crate) async fn notify(&self, payload: &str) -> Result<()> {
        connection::run!(&self.conns, |conn| sqlx::query("SELECT pg_notify($1, $2)")
            .bind(WAKE_CHANNEL)
            .bind(payload)
            .execute(conn))?;
        Ok(())
    }
}
