//! What a run does about the slots missed while no replica ran its key: the
//! [`CatchUp`] policy, and the planning the runtime does when it claims a
//! key ([`plan`]) and when a run succeeds ([`next_after_success`]).
//!
//! Pure functions of the schedule, the policy, the slot the key's row says
//! is pending and the server time of the claim, so every replica plans the
//! same.

use chrono::{DateTime, TimeDelta, Utc};

use super::{Schedule, never};
use crate::error::Result;
use crate::validate;

pub use leasehold_rules::MAX_CATCH_UP;

/// What happens to slots missed while no replica ran the key (fleet down,
/// paused, ...).
///
/// Set with [`JobSettings::catch_up`](crate::JobSettings::catch_up), or
/// `catch_up = "once" | "skip" | "all(N)"` in `#[job(...)]`.
///
/// ```
/// use std::time::Duration;
/// use leasehold::{CatchUp, JobSettings, Schedule};
///
/// // An hourly export that must cover every hour, but never more than the
/// // last day's worth after an outage.
/// let settings = JobSettings::new(Schedule::every(Duration::from_secs(3600)))
///     .catch_up(CatchUp::all(24));
/// assert_eq!(settings.get_catch_up(), CatchUp::All { max: 24 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CatchUp {
    /// Today's behaviour and the default: one run for the whole missed
    /// stretch, then the next future slot.
    #[default]
    Once,
    /// Missed slots are skipped: no run for them; the next run is the next
    /// future slot.
    ///
    /// A slot counts as missed when its run is claimed more than a tolerance
    /// after it: a minute (Quartz's misfire threshold), or half the gap to
    /// the following slot if that is shorter (a run that starts nearer its
    /// following slot than its own is late).
    Skip,
    /// Each missed slot runs, oldest first, but at most the latest `max` of
    /// them (older ones are skipped).
    All {
        /// How many of the latest missed slots run, 1 to [`MAX_CATCH_UP`].
        max: u32,
    },
}

impl CatchUp {
    /// [`CatchUp::All`] with at most `max` runs (1 to [`MAX_CATCH_UP`]).
    pub fn all(max: u32) -> CatchUp {
        CatchUp::All { max }
    }

    /// The slots a key's runs are for when a replica claims it at
    /// `claimed_at` while it has been due since `due` (both server time),
    /// oldest first, each run assumed to succeed at once: the planning the
    /// runtime does at each claim, as a pure function.
    ///
    /// Empty when nothing was due yet (`due` after `claimed_at`), for a
    /// manual schedule, and when [`CatchUp::Skip`] skips the missed slots.
    /// After these runs the key is next due at the first slot after
    /// `claimed_at` ([`Schedule::upcoming`]).
    ///
    /// ```
    /// use chrono::{DateTime, Utc};
    /// use leasehold::{CatchUp, Schedule};
    ///
    /// // 02:30 in Paris; the fleet was down from the 27th to the 31st of March 2026.
    /// let nightly = Schedule::cron_in("30 2 * * *", "Europe/Paris")?;
    /// let due: DateTime<Utc> = "2026-03-27T01:30:00Z".parse().unwrap();
    /// let back: DateTime<Utc> = "2026-03-31T12:00:00Z".parse().unwrap();
    /// let runs = |policy: CatchUp| -> Vec<String> {
    ///     policy.slots_to_run(&nightly, due, back).iter().map(|t| t.to_rfc3339()).collect()
    /// };
    /// // The latest three nights, oldest first (the 29th's at 03:00 CEST).
    /// assert_eq!(runs(CatchUp::all(3)), [
    ///     "2026-03-29T01:00:00+00:00",
    ///     "2026-03-30T00:30:00+00:00",
    ///     "2026-03-31T00:30:00+00:00",
    /// ]);
    /// assert_eq!(runs(CatchUp::Once), ["2026-03-31T00:30:00+00:00"]);
    /// assert!(runs(CatchUp::Skip).is_empty());
    /// # Ok::<(), leasehold::Error>(())
    /// ```
    pub fn slots_to_run(
        self,
        schedule: &Schedule,
        due: DateTime<Utc>,
        claimed_at: DateTime<Utc>,
    ) -> Vec<DateTime<Utc>> {
        let mut slots = Vec::new();
        let mut pending = due;
        // Each run is for a later slot, and All runs at most `max` of them:
        // the bound only guards against a schedule that would not advance.
        for _ in 0..=MAX_CATCH_UP {
            let SlotPlan::Run { slot: Some(slot) } = plan(schedule, self, Some(pending), claimed_at) else {
                break;
            };
            slots.push(slot);
            pending = next_after_success(schedule, self, Some(slot), claimed_at);
            if pending > claimed_at {
                break;
            }
        }
        slots
    }

    /// Checks the bound of `All`.
    pub(crate) fn validate(self) -> Result<()> {
        match self {
            CatchUp::All { max } => leasehold_rules::catch_up_bound(max).map(drop).map_err(validate::rule),
            _ => Ok(()),
        }
    }
}

/// What a run that just claimed a key does about its pending slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotPlan {
    /// Run, for this slot (`None`: not a scheduled slot — a trigger before
    /// the slot, a manual job, or a row with no slot recorded).
    Run { slot: Option<DateTime<Utc>> },
    /// Do not run (policy Skip and the pending slot was missed); record
    /// `next` as the next due slot.
    Skip { next: DateTime<Utc> },
}

/// What the run that claimed a key at `claimed_at` (server time) does:
/// `pending` is the slot the key's row says is pending (may be `None`).
///
/// - no pending slot, a manual schedule, or a pending slot still in the
///   future (a trigger ran the key early): `Run { slot: None }`, whatever
///   the policy;
/// - [`CatchUp::Once`]: run for the latest slot of `[pending, claimed_at]`;
/// - [`CatchUp::Skip`]: skip if the pending slot was missed (see
///   [`CatchUp::Skip`] for the tolerance), else run for it;
/// - [`CatchUp::All`]: run for the oldest of the latest `max` slots of
///   `[pending, claimed_at]`; [`next_after_success`] then makes the key due
///   at once for the next one, until it has caught up.
///
/// `pending` itself counts as a slot even when the schedule no longer has
/// it (it changed since the row was written).
pub(crate) fn plan(
    schedule: &Schedule,
    catch_up: CatchUp,
    pending: Option<DateTime<Utc>>,
    claimed_at: DateTime<Utc>,
) -> SlotPlan {
    let pending = match pending {
        Some(pending) if pending <= claimed_at && !matches!(schedule, Schedule::Manual) => pending,
        _ => return SlotPlan::Run { slot: None },
    };
    let slot = match catch_up {
        CatchUp::Once => schedule.latest_slots(pending, claimed_at, 1).pop().unwrap_or(pending),
        CatchUp::Skip => {
            if missed(schedule, pending, claimed_at) {
                return SlotPlan::Skip {
                    next: schedule.next_after(claimed_at).unwrap_or_else(never),
                };
            }
            pending
        }
        CatchUp::All { max } => {
            let max = usize::try_from(max.clamp(1, MAX_CATCH_UP)).unwrap_or(1);
            let later = schedule.latest_slots(pending, claimed_at, max);
            match later.first() {
                Some(oldest) if later.len() == max => *oldest,
                _ => pending,
            }
        }
    };
    SlotPlan::Run { slot: Some(slot) }
}

/// The next due slot after a run for `slot` (as returned by [`plan`])
/// succeeded; the run claimed its key at `claimed_at`.
///
/// The first slot after `claimed_at`, except under [`CatchUp::All`] after a
/// scheduled slot: the slot after *that* slot, which may already be past —
/// the key is then due again at once, for the next missed slot. Never for a
/// manual job.
pub(crate) fn next_after_success(
    schedule: &Schedule,
    catch_up: CatchUp,
    slot: Option<DateTime<Utc>>,
    claimed_at: DateTime<Utc>,
) -> DateTime<Utc> {
    let from = match (catch_up, slot) {
        (CatchUp::All { .. }, Some(slot)) => slot,
        _ => claimed_at,
    };
    schedule.next_after(from).unwrap_or_else(never)
}

/// The next due slot after a run for `slot` (claimed at `claimed_at`)
/// ended without a failure while its key's schedule changed, at
/// `changed_at` (server time), to `schedule` with `catch_up`: the new
/// schedule's first slot after the change and after the instant
/// [`next_after_success`] counts from — so after the slot just run, no new
/// slot the change came before is skipped, and no slot of the old schedule
/// is kept. Never for a manual schedule.
pub(crate) fn next_after_change(
    schedule: &Schedule,
    catch_up: CatchUp,
    slot: Option<DateTime<Utc>>,
    claimed_at: DateTime<Utc>,
    changed_at: DateTime<Utc>,
) -> DateTime<Utc> {
    let from = match (catch_up, slot) {
        (CatchUp::All { .. }, Some(slot)) => slot,
        _ => claimed_at,
    };
    schedule.next_after(from.max(changed_at)).unwrap_or_else(never)
}

/// Whether the claim at `claimed_at` came too late for `slot` (see
/// [`CatchUp::Skip`]).
fn missed(schedule: &Schedule, slot: DateTime<Utc>, claimed_at: DateTime<Utc>) -> bool {
    let mut tolerance = TimeDelta::seconds(60);
    if let Some(following) = schedule.next_after(slot) {
        tolerance = tolerance.min((following - slot) / 2);
    }
    claimed_at - slot > tolerance
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::at;
    use super::*;

    fn minutely() -> Schedule {
        Schedule::every(Duration::from_secs(60))
    }

    fn run(slot: &str) -> SlotPlan {
        SlotPlan::Run { slot: Some(at(slot)) }
    }

    const ALL_POLICIES: [CatchUp; 4] = [
        CatchUp::Once,
        CatchUp::Skip,
        CatchUp::All { max: 3 },
        CatchUp::All { max: 1 },
    ];

    /// What a key does from `pending` on when it is claimed at each of
    /// `claims` in turn (each claim a success): the slots it ran for, and
    /// its due time at the end.
    fn replay(schedule: &Schedule, policy: CatchUp, pending: &str, claims: &[&str]) -> (Vec<String>, DateTime<Utc>) {
        let mut due = at(pending);
        let mut ran = Vec::new();
        for claim in claims.iter().map(|c| at(c)) {
            if due > claim {
                continue; // not due: nobody claims it
            }
            due = match plan(schedule, policy, Some(due), claim) {
                SlotPlan::Run { slot } => {
                    ran.push(slot.map_or("-".to_owned(), |s| s.format("%H:%M").to_string()));
                    next_after_success(schedule, policy, slot, claim)
                }
                SlotPlan::Skip { next } => next,
            };
        }
        (ran, due)
    }

    #[test]
    fn early_triggers_manual_jobs_and_missing_slots_run_unscheduled() {
        let claimed = at("2026-11-30T10:00:30Z");
        for policy in ALL_POLICIES {
            // A trigger before the pending slot.
            let early = plan(&minutely(), policy, Some(at("2026-11-30T10:01:00Z")), claimed);
            assert_eq!(early, SlotPlan::Run { slot: None }, "{policy:?}");
            assert_eq!(
                next_after_success(&minutely(), policy, None, claimed),
                at("2026-11-30T10:01:00Z")
            );
            assert_eq!(plan(&minutely(), policy, None, claimed), SlotPlan::Run { slot: None });
            // A manual job, even with a slot recorded.
            let manual = plan(&Schedule::Manual, policy, Some(at("2026-11-30T10:00:00Z")), claimed);
            assert_eq!(manual, SlotPlan::Run { slot: None });
            assert_eq!(next_after_success(&Schedule::Manual, policy, None, claimed), never());
            assert_eq!(
                plan(&Schedule::Manual, policy, Some(never()), claimed),
                SlotPlan::Run { slot: None }
            );
        }
    }

    #[test]
    fn once_runs_one_catch_up_for_the_latest_missed_slot() {
        let s = minutely();
        let claimed = at("2026-11-30T10:04:30Z");
        assert_eq!(
            plan(&s, CatchUp::Once, Some(at("2026-11-30T10:00:00Z")), claimed),
            run("2026-11-30T10:04:00Z")
        );
        assert_eq!(
            next_after_success(&s, CatchUp::Once, Some(at("2026-11-30T10:04:00Z")), claimed),
            at("2026-11-30T10:05:00Z")
        );
        // On time: the pending slot itself.
        let on_time = at("2026-11-30T10:00:00.200Z");
        assert_eq!(
            plan(&s, CatchUp::Once, Some(at("2026-11-30T10:00:00Z")), on_time),
            run("2026-11-30T10:00:00Z")
        );
        // A pending slot the schedule no longer has still counts.
        let odd = Some(at("2026-11-30T10:00:30Z"));
        assert_eq!(
            plan(&s, CatchUp::Once, odd, at("2026-11-30T10:00:40Z")),
            run("2026-11-30T10:00:30Z")
        );
        // Fleet down for five slots: one run.
        let claims = ["2026-11-30T10:04:30Z", "2026-11-30T10:04:31Z", "2026-11-30T10:05:00.1Z"];
        let (ran, due) = replay(&s, CatchUp::Once, "2026-11-30T10:00:00Z", &claims);
        assert_eq!(ran, ["10:04", "10:05"]);
        assert_eq!(due, at("2026-11-30T10:06:00Z"));
    }

    #[test]
    fn skip_runs_on_time_slots_and_skips_missed_ones() {
        let hourly = Schedule::every(Duration::from_secs(3600));
        let p = Some(at("2026-11-30T10:00:00Z"));
        // Hourly: a minute of tolerance.
        assert_eq!(
            plan(&hourly, CatchUp::Skip, p, at("2026-11-30T10:00:59Z")),
            run("2026-11-30T10:00:00Z")
        );
        assert_eq!(
            plan(&hourly, CatchUp::Skip, p, at("2026-11-30T10:01:00Z")),
            run("2026-11-30T10:00:00Z")
        );
        let late = plan(&hourly, CatchUp::Skip, p, at("2026-11-30T10:01:01Z"));
        assert_eq!(
            late,
            SlotPlan::Skip {
                next: at("2026-11-30T11:00:00Z")
            }
        );
        // Down for hours: skipped to the next future slot.
        let late = plan(&hourly, CatchUp::Skip, p, at("2026-11-30T15:30:00Z"));
        assert_eq!(
            late,
            SlotPlan::Skip {
                next: at("2026-11-30T16:00:00Z")
            }
        );
        // Every minute: half the gap, 30 s.
        let s = minutely();
        assert_eq!(
            plan(&s, CatchUp::Skip, p, at("2026-11-30T10:00:30Z")),
            run("2026-11-30T10:00:00Z")
        );
        let late = plan(&s, CatchUp::Skip, p, at("2026-11-30T10:00:31Z"));
        assert_eq!(
            late,
            SlotPlan::Skip {
                next: at("2026-11-30T10:01:00Z")
            }
        );
        // Every second: half a second.
        let fast = Schedule::every(Duration::from_secs(1));
        assert_eq!(
            plan(&fast, CatchUp::Skip, p, at("2026-11-30T10:00:00.4Z")),
            run("2026-11-30T10:00:00Z")
        );
        assert!(matches!(
            plan(&fast, CatchUp::Skip, p, at("2026-11-30T10:00:00.6Z")),
            SlotPlan::Skip { .. }
        ));
        // After a run, the next future slot.
        assert_eq!(
            next_after_success(&s, CatchUp::Skip, p, at("2026-11-30T10:00:10Z")),
            at("2026-11-30T10:01:00Z")
        );
        // Fleet down for five slots: nothing runs until the next slot.
        let claims = ["2026-11-30T10:04:30Z", "2026-11-30T10:05:00.1Z"];
        let (ran, due) = replay(&s, CatchUp::Skip, "2026-11-30T10:00:00Z", &claims);
        assert_eq!(ran, ["10:05"]);
        assert_eq!(due, at("2026-11-30T10:06:00Z"));
    }

    #[test]
    fn all_runs_the_latest_missed_slots_oldest_first_and_no_more() {
        let s = minutely();
        let p = Some(at("2026-11-30T10:00:00Z"));
        let claimed = at("2026-11-30T10:04:30Z");
        // Five missed slots (10:00..10:04), at most three.
        assert_eq!(plan(&s, CatchUp::all(3), p, claimed), run("2026-11-30T10:02:00Z"));
        assert_eq!(
            next_after_success(&s, CatchUp::all(3), Some(at("2026-11-30T10:02:00Z")), claimed),
            at("2026-11-30T10:03:00Z"),
            "due again at once"
        );
        // Fewer missed slots than the bound: from the pending one.
        assert_eq!(plan(&s, CatchUp::all(10), p, claimed), run("2026-11-30T10:00:00Z"));
        assert_eq!(plan(&s, CatchUp::all(5), p, claimed), run("2026-11-30T10:00:00Z"));
        assert_eq!(plan(&s, CatchUp::all(1), p, claimed), run("2026-11-30T10:04:00Z"));

        let claims = [
            "2026-11-30T10:04:30Z",
            "2026-11-30T10:04:31Z",
            "2026-11-30T10:04:32Z",
            "2026-11-30T10:04:33Z",
            "2026-11-30T10:05:00.1Z",
        ];
        let (ran, due) = replay(&s, CatchUp::all(3), "2026-11-30T10:00:00Z", &claims);
        assert_eq!(ran, ["10:02", "10:03", "10:04", "10:05"]);
        assert_eq!(due, at("2026-11-30T10:06:00Z"));
        // Under a larger bound, every missed slot, one claim each.
        let (ran, due) = replay(&s, CatchUp::all(10), "2026-11-30T10:00:00Z", &claims);
        assert_eq!(ran, ["10:00", "10:01", "10:02", "10:03", "10:04"]);
        assert_eq!(due, at("2026-11-30T10:05:00Z"), "due at once for 10:05");
        // A catch-up slower than the schedule keeps to the latest `max`.
        let slow = [
            "2026-11-30T10:04:30Z",
            "2026-11-30T10:07:30Z",
            "2026-11-30T10:07:31Z",
            "2026-11-30T10:07:32Z",
        ];
        let (ran, due) = replay(&s, CatchUp::all(3), "2026-11-30T10:00:00Z", &slow);
        assert_eq!(ran, ["10:02", "10:05", "10:06", "10:07"]);
        assert_eq!(due, at("2026-11-30T10:08:00Z"));
    }

    #[test]
    fn all_catches_up_on_a_zoned_cron_across_a_transition() {
        // 02:30 in Paris, fleet down from the 27th to the 31st of March 2026
        // (the 29th's 02:30 ran at 03:00 CEST, 01:00Z).
        let s = Schedule::cron_in("30 2 * * *", "Europe/Paris").unwrap();
        let p = Some(at("2026-03-27T01:30:00Z"));
        let claimed = at("2026-03-31T12:00:00Z");
        assert_eq!(plan(&s, CatchUp::all(3), p, claimed), run("2026-03-29T01:00:00Z"));
        assert_eq!(
            next_after_success(&s, CatchUp::all(3), Some(at("2026-03-29T01:00:00Z")), claimed),
            at("2026-03-30T00:30:00Z")
        );
        assert_eq!(plan(&s, CatchUp::Once, p, claimed), run("2026-03-31T00:30:00Z"));
        assert_eq!(
            plan(&s, CatchUp::Skip, p, claimed),
            SlotPlan::Skip {
                next: at("2026-04-01T00:30:00Z")
            }
        );
    }

    #[test]
    fn slots_to_run_replays_the_planning_of_each_claim() {
        let s = minutely();
        let due = at("2026-11-30T10:00:00Z");
        let back = at("2026-11-30T10:04:30Z");
        let hm = |slots: Vec<DateTime<Utc>>| slots.iter().map(|t| t.format("%H:%M").to_string()).collect::<Vec<_>>();
        assert_eq!(hm(CatchUp::Once.slots_to_run(&s, due, back)), ["10:04"]);
        assert!(CatchUp::Skip.slots_to_run(&s, due, back).is_empty());
        assert_eq!(
            hm(CatchUp::all(3).slots_to_run(&s, due, back)),
            ["10:02", "10:03", "10:04"]
        );
        assert_eq!(
            hm(CatchUp::all(10).slots_to_run(&s, due, back)),
            ["10:00", "10:01", "10:02", "10:03", "10:04"]
        );
        // On time, every policy runs the due slot; early or manual, none.
        let on_time = at("2026-11-30T10:00:00.2Z");
        for policy in ALL_POLICIES {
            assert_eq!(hm(policy.slots_to_run(&s, due, on_time)), ["10:00"], "{policy:?}");
            assert!(policy.slots_to_run(&s, due, at("2026-11-30T09:59:00Z")).is_empty());
            assert!(policy.slots_to_run(&Schedule::Manual, due, back).is_empty());
        }
        // The most a catch-up runs, on a per-second schedule down for a day.
        let fast = Schedule::every(Duration::from_secs(1));
        let most = CatchUp::all(MAX_CATCH_UP).slots_to_run(&fast, due, due + TimeDelta::days(1));
        assert_eq!(most.len(), MAX_CATCH_UP as usize);
        assert_eq!(most.last(), Some(&(due + TimeDelta::days(1))));
    }

    /// A run for 12:00 on "every 3 min", claimed at 12:00:05, during which
    /// the key went to every minute: the next slot is the new schedule's
    /// first after the change — not 12:03, not 12:01 when the change came
    /// after it — and never before the slot run; to every 5 minutes: 12:05,
    /// never the old 12:03.
    #[test]
    fn after_a_change_the_next_slot_is_the_new_schedules_first_after_it() {
        let (slot, claimed) = (Some(at("2026-11-30T12:00:00Z")), at("2026-11-30T12:00:05Z"));
        let every = |min: u64| Schedule::every(Duration::from_secs(60 * min));
        let next = |schedule: &Schedule, policy, changed: &str| {
            next_after_change(schedule, policy, slot, claimed, at(changed))
        };
        for policy in ALL_POLICIES {
            assert_eq!(
                next(&every(1), policy, "2026-11-30T12:00:20Z"),
                at("2026-11-30T12:01:00Z")
            );
            assert_eq!(
                next(&every(1), policy, "2026-11-30T12:01:30Z"),
                at("2026-11-30T12:02:00Z")
            );
            assert_eq!(
                next(&every(5), policy, "2026-11-30T12:00:20Z"),
                at("2026-11-30T12:05:00Z")
            );
            // A change before the claim (its sync came late): from the claim on.
            assert_eq!(
                next(&every(1), policy, "2026-11-30T11:58:00Z"),
                at("2026-11-30T12:01:00Z")
            );
            assert_eq!(next(&Schedule::Manual, policy, "2026-11-30T12:00:20Z"), never());
        }
        // Under All, a change before the slot counts from the slot.
        let late = at("2026-11-30T12:30:00Z");
        assert_eq!(
            next_after_change(&every(1), CatchUp::all(3), slot, late, at("2026-11-30T11:00:00Z")),
            at("2026-11-30T12:01:00Z")
        );
    }

    #[test]
    fn the_bound_of_all_is_checked() {
        assert_eq!(CatchUp::default(), CatchUp::Once);
        assert_eq!(CatchUp::all(24), CatchUp::All { max: 24 });
        for ok in [
            CatchUp::Once,
            CatchUp::Skip,
            CatchUp::all(1),
            CatchUp::all(MAX_CATCH_UP),
        ] {
            ok.validate().unwrap();
        }
        for bad in [0, MAX_CATCH_UP + 1] {
            let msg = CatchUp::all(bad).validate().unwrap_err().to_string();
            assert!(
                msg.contains(&format!("catch-up bound {bad}")) && msg.contains("1 to 1000"),
                "{msg}"
            );
        }
    }
}
