//! The wake-up channel: its name, the listener's session check and probe.

use super::LeaseStore;
use crate::connection;
use crate::error::Result;

/// The `LISTEN`/`NOTIFY` channel of wake-ups. The payload is a key that may
/// be claimable now. Every statement that notifies binds this constant, so
/// the name lives here only.
pub(crate) const WAKE_CHANNEL: &str = "leasehold";

/// The custom setting the listener's connection carries in its startup
/// packet (`options=-c leasehold.listener=<mark>`): only the server
/// process a connection started applies it, so a backend that shows the
/// mark is the one this connection opened.
pub(crate) const SESSION_MARK: &str = "leasehold.listener";

/// Whether `error` is a connection pooler refusing the listener's
/// [`SESSION_MARK`] at connect time — what PgBouncer (and the poolers built
/// on it: Neon's, Supabase's) answers to a startup option it does not
/// forward to a session: "unsupported startup parameter: options" (before
/// 1.20) or "unsupported startup parameter in options: …". PostgreSQL
/// itself accepts any `-c` setting with a dot in its name.
pub(crate) fn is_pooler_refusal(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .is_some_and(|e| e.message().starts_with("unsupported startup parameter"))
}

impl LeaseStore {
    /// Whether `listener` is a session of its own on the server, as `LISTEN`
    /// needs — false behind a transaction-pooling proxy (PgBouncer in
    /// transaction or statement mode), where `LISTEN` must never be sent:
    /// the server connection it ran on goes back to the proxy's pool still
    /// listening, and the *service's* next query on it fails with an
    /// unexpected notification.
    ///
    /// `listener` must have been opened with `mark` as [`SESSION_MARK`] in
    /// its startup options. Side-effect free. Two checks, both needed:
    ///
    /// 1. **The mark** decides for every pooler that does not hand its
    ///    clients' startup options to the server (PgBouncer in every mode
    ///    either refuses the option, [`is_pooler_refusal`], or ignores it when
    ///    told to): the backend the listener's statement ran on must show
    ///    `mark`. A real session started with it; a pooler's server
    ///    connection never did. This answer does not depend on timing.
    /// 2. **The rounds** cover a pooler that would replay the option on every
    ///    server connection it links: while one of this store's pooled
    ///    connections holds a transaction open (so a proxy cannot hand its
    ///    backend to anyone else), the listener's backend pid is read before
    ///    and after. A real session keeps its pid and never shares it;
    ///    through a transaction pooler the pooled transaction usually lands
    ///    on the backend the listener just used, or the listener moves. A
    ///    round can be fooled (another client borrows that backend in
    ///    between), so all `SESSION_CHECK_ROUNDS` must pass.
    pub(crate) async fn is_own_session(&self, listener: &mut sqlx::postgres::PgListener, mark: &str) -> Result<bool> {
        const MARK: &str = "SELECT current_setting($1, true)";
        const PID: &str = "SELECT pg_backend_pid()";
        const SESSION_CHECK_ROUNDS: usize = 8;
        let shown: Option<String> = sqlx::query_scalar(MARK)
            .bind(SESSION_MARK)
            .fetch_one(&mut *listener)
            .await?;
        if shown.as_deref() != Some(mark) {
            return Ok(false);
        }
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

    /// Sends `payload` on the wake-up channel (the listener's probe; a
    /// probe sent twice is heard once).
    pub(crate) async fn notify(&self, payload: &str) -> Result<()> {
        connection::run_resending!(&self.conns, |conn| sqlx::query("SELECT pg_notify($1, $2)")
            .bind(WAKE_CHANNEL)
            .bind(payload)
            .execute(conn))?;
        Ok(())
    }
}
