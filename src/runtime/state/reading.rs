//! The scheduler's reading of an answer: when a key the server answered
//! about is next worth a claim.

use std::time::Duration;

use tokio::time::Instant;

use super::ServerClock;
use crate::lease::Sighting;

/// A key that was free and due but went to another claimer's lock is looked
/// at again this soon: the other claim is a few milliseconds from commit.
const RACE_RETRY: Duration = Duration::from_millis(25);

/// An overdue paused key is looked at again this often. A resume wakes its
/// keys sooner: by notification, and by moving their due time into the
/// next poll's window.
const PAUSED_RECHECK: Duration = Duration::from_secs(30);

/// What the scheduler needs to turn the server's answers into local
/// instants: when it is, whether notifications are heard, the poll
/// interval, the server's clock.
pub(crate) struct Reading<'a> {
    pub(crate) now: Instant,
    pub(crate) listening: bool,
    pub(crate) poll_interval: Duration,
    pub(crate) clock: &'a ServerClock,
}

impl Reading<'_> {
    /// When a key the server answered about is next worth a claim: a held
    /// lease when it would expire (or the next poll, if wake-ups are not
    /// heard), a free one when due, a free and due one lost to another
    /// claimer shortly, one held back by its job's fleet-wide limit at the
    /// instant it fell due (its job is held back as a whole until a place
    /// frees).
    pub(crate) fn look_again(&self, sighting: &Sighting) -> Instant {
        let now = self.now;
        match sighting.held_for() {
            Some(left) if self.listening => now + left,
            Some(left) => now + left.min(self.poll_interval),
            None if sighting.paused && sighting.due_in().is_zero() => now + PAUSED_RECHECK,
            // A key of a job with a fleet-wide limit — held back (no place),
            // or passed over for the room — stays due, at the instant it
            // fell due, so its job's keys are proposed oldest first; while
            // its job's places are all taken the runtime holds them back
            // (`NameLimits::hold_fleet`).
            None if sighting.limited && sighting.due_in().is_zero() => self
                .clock
                .instant_of(sighting.next_due_at.unwrap_or(sighting.server_now))
                .min(now),
            None if sighting.due_in().is_zero() => now + RACE_RETRY,
            None => self.clock.local(sighting.next_due_at.unwrap_or(sighting.server_now)),
        }
    }
}

#[cfg(test)]
mod tests {
    //! When the scheduler looks at a key again, for each kind of answer.

    use std::time::Duration;

    use chrono::TimeDelta;
    use tokio::time::Instant;

    use super::{PAUSED_RECHECK, RACE_RETRY, Reading};
    use crate::runtime::state::ServerClock;
    use crate::runtime::state::testing::{LEASE, free, held_elsewhere, server_noon};

    fn reading(clock: &ServerClock, listening: bool) -> Reading<'_> {
        Reading {
            now: Instant::now(),
            listening,
            poll_interval: Duration::from_secs(10),
            clock,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_key_is_looked_at_when_its_lease_expires_or_at_the_next_poll_if_deaf() {
        let clock = ServerClock::default();
        let now = Instant::now();
        let held = held_elsewhere("k");
        assert_eq!(reading(&clock, true).look_again(&held), now + LEASE);
        assert_eq!(
            reading(&clock, false).look_again(&held),
            now + Duration::from_secs(10),
            "no wake-ups heard: the poll comes first"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_free_key_is_looked_at_when_due_soon_after_a_lost_race_and_rarely_while_paused() {
        let clock = ServerClock::default();
        clock.observed(server_noon());
        let now = Instant::now();
        let read = reading(&clock, true);
        let overdue = TimeDelta::seconds(-5);
        assert_eq!(
            read.look_again(&free("k", overdue, false)),
            now + RACE_RETRY,
            "lost to another claimer"
        );
        assert_eq!(
            read.look_again(&free("k", overdue, true)),
            now + PAUSED_RECHECK,
            "paused"
        );
        assert_eq!(
            read.look_again(&free("k", TimeDelta::minutes(5), false)),
            now + Duration::from_secs(300),
            "not due: when it is, by the server's clock"
        );
        assert_eq!(
            read.look_again(&free("k", TimeDelta::minutes(5), true)),
            now + Duration::from_secs(300),
            "paused but not due: its due time still comes first"
        );
    }
}
