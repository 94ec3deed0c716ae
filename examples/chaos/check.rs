//! The checker: reads the ledger, the counter history and the replicas' own
//! logs after the run, and judges them. Every time here is the server's
//! clock in µs since the epoch (fault windows are converted to it).
//!
//! [`check`] derives what the ledger says about runs once ([`History`],
//! [`Schedule`]), runs the eighteen checks (numbered as in
//! docs/operations.md, "Running the chaos harness"), fails each that
//! examined nothing ([`Check::require_something`]), and reports:
//!
//! | checks | where |
//! |---|---|
//! | 1–5: fences order the writes | `check/fences.rs` |
//! | 6–7: acknowledged runs lost nothing | `check/durability.rs` |
//! | 8–10: slots ran once, jobs ran again | `check/slots.rs` |
//! | 11–12: no connection left in a transaction | `check/connections.rs` |
//! | 13–14: lease writes committed on their own | `commits.rs` |
//! | 15–16: fenced commits within their tenure, no key stalled | `check/tenures.rs` |
//! | 17: no two runs of a key overlap in real time | `check/overlap.rs` |
//! | 18: no more runs of the limited job at once than its fleet-wide limit | `check/limit.rs` |
//!
//! and the verdict table is `check/report.rs`.

mod connections;
mod durability;
mod fences;
mod history;
mod limit;
mod overlap;
#[cfg(test)]
mod promotion_tests;
mod report;
mod slots;
mod tenures;
#[cfg(test)]
mod tests;

use crate::backends::{Orphan, Scan};
use crate::commits::LeaseWrite;
use crate::faults::FaultKind;

use history::{History, Schedule};

/// The quiet tail after the last fault has at least this many slots in
/// which every job must run exactly once (the orchestrator's `--tail` is
/// sized for it: see [`min_tail`]).
pub const QUIET_SLOTS: i64 = 5;

/// The shortest tail that leaves [`QUIET_SLOTS`] checkable slots: a margin
/// of lease + period after the last fault (its leases expire, its
/// interrupted slots run again), the slots, one more period for slot
/// alignment, and the same margin again before the end, so the last slot's
/// run has committed before the fleet stops.
pub fn min_tail(lease: std::time::Duration, period: std::time::Duration) -> std::time::Duration {
    (lease + period) * 2 + period * (QUIET_SLOTS as u32 + 1)
}

/// A row of `chaos_ledger`: one accepted step of one run.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LedgerRow {
    pub id: i64,
    pub key: String,
    pub fence: i64,
    pub run_id: String,
    pub step: i32,
    pub holder: String,
    pub slot: i64,
    pub at: i64,
    /// When its transaction committed (`chaos_ledger_commit`: a deferred
    /// trigger's `clock_timestamp()` at COMMIT); `None` if not recorded.
    pub committed: Option<i64>,
    /// The transaction that wrote it (`pg_current_xact_id()`).
    pub xid: i64,
}

/// A row of `chaos_counter_history`: one accepted counter write.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CounterRow {
    pub id: i64,
    pub key: String,
    pub old_fence: i64,
    pub new_fence: i64,
    pub run_id: String,
    pub at: i64,
    /// The transaction that wrote it (`pg_current_xact_id()`).
    pub xid: i64,
}

/// A line of a replica's event log.
#[derive(Debug, Clone)]
pub struct Event {
    /// When the replica logged it (its real clock, put on the server's).
    pub at: i64,
    pub kind: String,
    pub key: String,
    pub fence: i64,
    /// The replica's holder id (`r<n>-g<generation>`).
    pub holder: String,
    pub detail: String,
}

impl Event {
    /// `unix_us kind key fence holder slot detail`
    pub fn parse(line: &str) -> Option<Event> {
        let mut f = line.splitn(7, '\t');
        let at: i64 = f.next()?.parse().ok()?;
        let kind = f.next()?.to_owned();
        let key = f.next()?.to_owned();
        let fence = f.next()?.parse().ok()?;
        let holder = f.next()?.to_owned();
        let _slot = f.next()?;
        let detail = f.next().unwrap_or("").to_owned();
        Some(Event {
            at,
            kind,
            key,
            fence,
            holder,
            detail,
        })
    }
}

/// Which jobs' runs a fault could reach: the jobs a replica had something
/// to do with around the fault (see `check/history.rs`, `Schedule`), one
/// key, or every job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// PostgreSQL restarts and the promotion (every connection), a
    /// `terminate` whose backends' replicas are unknown.
    All,
    /// A fault aimed at one replica; a `terminate`, the replicas whose
    /// backends it ended.
    Replicas(Vec<usize>),
    /// `expire`: the key whose lease it expired.
    Key(String),
}

impl Reach {
    /// What a fault record (`faults.rs`) could reach, by its kind and
    /// target: `r3 …` for a replica fault, `chaos:7` for `expire`,
    /// `2 backends of r0,r3` for `terminate`.
    pub fn of(kind: FaultKind, target: &str) -> Reach {
        match kind {
            FaultKind::PgFast | FaultKind::PgImmediate | FaultKind::Promote => Reach::All,
            FaultKind::Expire => Reach::Key(target.to_owned()),
            FaultKind::Terminate => target
                .split_once(" of ")
                .and_then(|(_, replicas)| replicas.split(',').map(Window::replica_of).collect::<Option<Vec<_>>>())
                .map_or(Reach::All, Reach::Replicas),
            _ => Window::replica_of(target).map_or(Reach::All, |r| Reach::Replicas(vec![r])),
        }
    }
}

/// A fault window on the server clock.
#[derive(Debug, Clone)]
pub struct Window {
    pub kind: FaultKind,
    /// The replica a replica fault aimed at (`None` for the others).
    pub replica: Option<usize>,
    /// Which jobs' runs the fault could reach (check 8).
    pub reach: Reach,
    /// Whether the fault also expired leases early on the server
    /// (`expire`, and a `begin-drop` marked `+expired`).
    pub expires_leases: bool,
    pub start: i64,
    pub end: i64,
}

impl Window {
    /// An asynchronous promotion's lag window: every commit in it may be
    /// lost (`promote.rs`), and the leases with them (`expires_leases`).
    pub fn loses_commits(&self) -> bool {
        self.kind == FaultKind::Promote && self.expires_leases
    }

    /// The replica a fault record's target names (`r3`, `r3 +120ms`, …),
    /// or a holder id (`r3-g2`) belongs to.
    pub fn replica_of(target: &str) -> Option<usize> {
        let digits: String = target
            .strip_prefix('r')?
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    }
}

pub struct Input {
    pub keys: Vec<String>,
    /// How many replica processes ran (`r0` ..).
    pub replicas: usize,
    pub period_us: i64,
    pub lease_us: i64,
    /// The replicas' runtime poll interval.
    pub poll_us: i64,
    pub steps: u32,
    pub observe_from: i64,
    pub observe_to: i64,
    pub ledger: Vec<LedgerRow>,
    pub counter: Vec<CounterRow>,
    /// Every committed write to `leasehold_lease` (`commits.rs`).
    pub lease_writes: Vec<LeaseWrite>,
    pub events: Vec<Event>,
    pub windows: Vec<Window>,
    pub skipped: Vec<FaultKind>,
    /// `pg_stat_activity` after the quiet tail, before the fleet stops.
    pub backends: Scan,
    /// Transactions seen idle after an autocommit statement during the run
    /// (times on the server clock), and how many samples were taken.
    pub orphans: Vec<Orphan>,
    pub samples: usize,
    /// The run's promotion (`--standby`), if one happened.
    pub promotion: Option<Promotion>,
    /// The limited job and its limit (`--limited-jobs`, `--fleet-limit`);
    /// `None` when the run had none. Its keys are not in [`Input::keys`]:
    /// the slot checks (8–10, 16) do not apply to keys that wait for a
    /// place by design; every other check covers them.
    pub limited: Option<Limited>,
}

/// The limited job of a run (check 18).
#[derive(Debug, Clone)]
pub struct Limited {
    /// Its name (`limited`).
    pub job: String,
    pub keys: Vec<String>,
    /// At most this many runs at once, across the fleet.
    pub limit: u32,
    /// When the limit was set (`leasehold_limit.set_at`): runs claimed
    /// before it are not counted.
    pub set_at: i64,
    /// The job's rows of the run history (`leasehold_run`), the second
    /// count (reported, not judged).
    pub history: Vec<RunRecord>,
}

/// A row of `leasehold_run`: one run as the server recorded it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RunRecord {
    pub key: String,
    pub fence: i64,
    pub holder: String,
    /// `succeeded`, `failed`, `cancelled`, … and, for a cancelled run, why
    /// (`deadline`, `stolen`, …).
    pub outcome: String,
    pub reason: Option<String>,
    /// Its claim, and its release (or, for a lost run, its lease's expiry
    /// or its key's next claim), server clock.
    pub started_at: i64,
    pub ended_at: i64,
}

impl Input {
    /// `at` falls in an asynchronous promotion's lag window, whose commits
    /// the promoted server may lack.
    pub fn in_lost_window(&self, at: i64) -> bool {
        self.windows
            .iter()
            .any(|w| w.loses_commits() && w.start <= at && at <= w.end)
    }
}

/// The run's promotion (`promote.rs`): its moments, shifted to the server
/// clock, and what the promoted server recorded of it.
#[derive(Debug, Clone)]
pub struct Promotion {
    pub at: crate::servers::Promotion,
    /// `leasehold_timeline` at the end: the timeline fences were last drawn
    /// on, and the fence sequence's last jump (from, to).
    pub timeline: Option<i64>,
    pub jump: Option<(i64, i64)>,
}

/// One check: its name, what it found, and its first examples (five,
/// unless [`Check::listing`] raised the limit).
///
/// A check that examined nothing proved nothing, so it does not pass:
/// [`Check::require_something`] makes `0 checked` a violation, with the
/// check's own word on what the run lacked ([`Check::when_empty`]). Every
/// check has something to look at in any run that ran jobs under faults
/// (the CI run included), with two exceptions, said in the verdict: check
/// 8 in a run too short to be sure to have calm slots
/// ([`Check::not_required`], `check/slots.rs`), and check 18 in a run
/// without a limited job (`--limited-jobs 0`, `check/limit.rs`).
pub struct Check {
    name: &'static str,
    pub checked: usize,
    violations: usize,
    examples: Vec<String>,
    limit: usize,
    /// What a run that gave the check nothing to examine lacked.
    empty: &'static str,
    /// Why examining nothing is no violation in this run, if it is not.
    exempt: Option<String>,
}

impl Check {
    pub fn new(name: &'static str) -> Check {
        Check {
            name,
            checked: 0,
            violations: 0,
            examples: Vec::new(),
            limit: 5,
            empty: "the run left it nothing to look at",
            exempt: None,
        }
    }

    /// Says what a run in which this check examined nothing lacked.
    pub fn when_empty(self, why: &'static str) -> Check {
        Check { empty: why, ..self }
    }

    /// Makes examining nothing no violation in this run, for `why` (which
    /// the verdict prints instead of `ok`).
    pub fn not_required(&mut self, why: String) {
        self.exempt = Some(why);
    }

    /// `0 checked` is a violation (unless [`Check::not_required`]): an `ok`
    /// over nothing would say nothing.
    pub fn require_something(&mut self) {
        if self.checked == 0 && self.exempt.is_none() {
            self.fail(format!("examined nothing ({})", self.empty));
        }
    }

    /// Whether the check examined nothing.
    pub fn examined_nothing(&self) -> bool {
        self.checked == 0
    }

    /// Why examining nothing is no violation in this run, if it is not.
    pub fn exempt(&self) -> Option<&str> {
        self.exempt.as_deref()
    }

    /// A check whose violations are worth listing one by one, up to `limit`.
    pub fn listing(name: &'static str, limit: usize) -> Check {
        Check {
            limit,
            ..Check::new(name)
        }
    }

    pub fn fail(&mut self, example: String) {
        self.violations += 1;
        if self.examples.len() < self.limit {
            self.examples.push(example);
        }
    }
}

pub struct Verdict {
    pub text: String,
    pub violations: usize,
}

pub fn secs(us: i64, origin: i64) -> String {
    format!("{:.3}s", (us - origin) as f64 / 1e6)
}

/// Runs every check on what the run left and writes the verdict.
pub fn check(input: &Input) -> Verdict {
    let history = History::new(input);
    let tenures = tenures::Tenures::new(input);
    let mut measured = tenures::Measured::default();
    let schedule = Schedule::new(input);
    let (calm_slots, near_faults) = slots::calm_slots_ran_once(&history, &schedule);
    let (quiet_tail, tail) = slots::quiet_tail_ran_once(&history, &schedule);
    let mut overlaps = overlap::Overlaps::default();
    let mut limited = limit::LimitCount::default();
    let mut checks = [
        fences::commit_order(&history),
        fences::no_write_after_higher_fence(&history),
        fences::runs_never_interleave(&history),
        fences::one_run_per_fence(input),
        fences::counter_never_goes_back(&history),
        durability::done_runs_have_all_steps(&history),
        durability::done_runs_have_all_counter_writes(&history),
        calm_slots,
        slots::every_job_ran_again(&history, &schedule),
        quiet_tail,
        connections::none_idle_in_transaction_at_end(input),
        connections::none_orphaned_during_run(&history),
        crate::commits::lease_writes_alone(input),
        crate::commits::runs_claims_committed(input),
        tenures::fenced_commits_within_tenure(&tenures, &mut measured),
        tenures::no_due_key_stalled(&history, &tenures, &mut measured),
        overlap::runs_never_overlap(input, &mut overlaps),
        limit::never_above_the_limit(&history, &tenures, &mut limited),
    ];
    for c in &mut checks {
        c.require_something();
    }
    report::verdict(
        &history,
        &checks,
        &near_faults,
        &tail,
        (&tenures, &measured),
        (&overlaps, &limited),
    )
}
