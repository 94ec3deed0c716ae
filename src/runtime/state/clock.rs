//! The server's clock, as seen from this process.

use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

/// Maps the server's clock onto this process's monotonic clock, from the
/// latest answer that carried the server's time. Only used to decide when
/// to *look* at a key again — never for a safety decision, which the server
/// makes with its own clock.
#[derive(Default)]
pub(crate) struct ServerClock {
    anchor: Mutex<Option<(Instant, DateTime<Utc>)>>,
}

impl ServerClock {
    pub(crate) fn observed(&self, server_now: DateTime<Utc>) {
        *self.anchor.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), server_now));
    }

    /// The local instant at which the server's clock reads `at` (capped a
    /// day ahead: the queue is a hint, and a "never" due time is year 9999).
    pub(crate) fn local(&self, at: DateTime<Utc>) -> Instant {
        let now = Instant::now();
        let Some((seen, server)) = *self.anchor.lock().unwrap_or_else(|p| p.into_inner()) else {
            return now;
        };
        let server_now = server + chrono::TimeDelta::from_std(now - seen).unwrap_or_default();
        let ahead = (at - server_now).to_std().unwrap_or(Duration::ZERO);
        now + ahead.min(Duration::from_secs(86_400))
    }

    /// The local instant of the server time `at`, past or future (at most a
    /// day either way): [`ServerClock::local`] without its floor at now,
    /// for ordering keys by when they fell due.
    pub(crate) fn instant_of(&self, at: DateTime<Utc>) -> Instant {
        let now = Instant::now();
        let Some((seen, server)) = *self.anchor.lock().unwrap_or_else(|p| p.into_inner()) else {
            return now;
        };
        let server_now = server + chrono::TimeDelta::from_std(now - seen).unwrap_or_default();
        let day = Duration::from_secs(86_400);
        match (at - server_now).to_std() {
            Ok(ahead) => now + ahead.min(day),
            Err(_) => {
                let behind = (server_now - at).to_std().unwrap_or_default().min(day);
                now.checked_sub(behind).unwrap_or(now)
            }
        }
    }

    /// The server's clock now, as last seen plus the local time since.
    pub(crate) fn server_now(&self) -> Option<DateTime<Utc>> {
        let (seen, server) = (*self.anchor.lock().unwrap_or_else(|p| p.into_inner()))?;
        Some(server + chrono::TimeDelta::from_std(seen.elapsed()).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    //! The estimate on tokio's paused clock: time moves only when the test
    //! advances it, so every instant is exact.

    use std::time::Duration;

    use chrono::TimeDelta;
    use tokio::time::Instant;

    use super::ServerClock;
    use crate::runtime::state::testing::server_noon;

    #[tokio::test(start_paused = true)]
    async fn before_any_answer_everything_is_worth_a_look_now() {
        let clock = ServerClock::default();
        assert_eq!(clock.server_now(), None);
        assert_eq!(clock.local(server_noon() + TimeDelta::hours(1)), Instant::now());
    }

    #[tokio::test(start_paused = true)]
    async fn the_servers_clock_runs_on_from_its_last_answer_at_the_local_rate() {
        let clock = ServerClock::default();
        let noon = server_noon();
        clock.observed(noon);
        tokio::time::advance(Duration::from_secs(10)).await;

        assert_eq!(clock.server_now(), Some(noon + TimeDelta::seconds(10)));
        let now = Instant::now();
        assert_eq!(
            clock.local(noon + TimeDelta::seconds(40)),
            now + Duration::from_secs(30)
        );
        assert_eq!(clock.local(noon), now, "a time already past is now");

        // A later answer moves the anchor: the server's clock was behind.
        clock.observed(noon + TimeDelta::seconds(5));
        assert_eq!(
            clock.local(noon + TimeDelta::seconds(40)),
            now + Duration::from_secs(35)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_due_time_of_never_is_looked_at_again_within_a_day() {
        let clock = ServerClock::default();
        clock.observed(server_noon());
        let never = crate::schedule::never();
        assert_eq!(clock.local(never), Instant::now() + Duration::from_secs(86_400));
    }
}
