//! What the commands share, so that no command imports another: the
//! operator the CLI acts as, how an action's answer is said, and the lease
//! row, pause and fleet-wide limit as the commands present them (text and
//! `--json`).

use std::fmt::Display;
use std::ops::Deref;

use chrono::{DateTime, Utc};
use leasehold::{
    operator::{FleetLimit, Operator, OperatorAction, Pause, Target},
    store::{KeyState, LeaseInfo, LeaseStore},
};
use serde::Serialize;

use crate::db::Db;
use crate::failure::Failure;
use crate::text::{self, Align};

/// The operator the CLI acts as ([`default_by`]), on `db`: every action
/// goes through it, so the key's history records who took it.
pub(crate) fn operator(db: &Db) -> Result<Operator, Failure> {
    operator_by(db, default_by())
}

/// The operator `by` acting on `db`, only on the schema this CLI was built
/// for: each action's own statement checks the version, so an action is
/// one statement (`Operator::checking_schema`).
pub(crate) fn operator_by(db: &Db, by: String) -> Result<Operator, Failure> {
    Ok(Operator::new(LeaseStore::new(db.pool.clone()), by)
        .map_err(|e| db.failure(e))?
        .checking_schema())
}

/// What a command prints for an action's answer: the action, what it was
/// taken on and the library's words for the outcome (the `Display` of its
/// answer) — what the key's history records and the console shows — on
/// one line, safe for a terminal.
pub(crate) fn said(action: OperatorAction, on: &Target, outcome: impl Display) -> String {
    text::one_line(&format!("{action} {on}: {outcome}"))
}

/// `$USER@<hostname>`, or `leasehold-cli` when the user is unknown: who
/// the CLI's actions are recorded as (`pause --by` overrides it). Always a
/// name the actor rule accepts: characters it refuses are dropped, and it
/// is cut to `MAX_KEY_BYTES`.
pub(crate) fn default_by() -> String {
    let nonempty = |s: String| {
        let s: String = s.trim().chars().filter(|c| !text::unsafe_char(*c)).collect();
        (!s.is_empty()).then_some(s)
    };
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .and_then(nonempty);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .and_then(nonempty)
        .or_else(|| std::env::var("HOSTNAME").ok().and_then(nonempty));
    let by = match (user, host) {
        (Some(user), Some(host)) => format!("{user}@{host}"),
        (Some(user), None) => user,
        (None, _) => "leasehold-cli".to_owned(),
    };
    if by.len() > leasehold::store::MAX_KEY_BYTES {
        let mut end = leasehold::store::MAX_KEY_BYTES;
        while !by.is_char_boundary(end) {
            end -= 1;
        }
        return by[..end].to_owned();
    }
    by
}

/// One lease row, read with the server clock of the same statement: the
/// library's `LeaseInfo` (its fields and its readings, `state()`,
/// `due_only_when_triggered()`, through `Deref`), with the CLI's ways of
/// showing it.
#[derive(Debug)]
pub(crate) struct Row(pub(crate) LeaseInfo);

impl Deref for Row {
    type Target = LeaseInfo;

    fn deref(&self) -> &LeaseInfo {
        &self.0
    }
}

impl Row {
    pub(crate) fn held(&self) -> bool {
        self.state() == KeyState::Held
    }

    /// A key registered by a runtime but never claimed: its holder and
    /// fence are placeholders.
    pub(crate) fn never_run(&self) -> bool {
        self.state() == KeyState::NeverRun
    }

    /// Seconds until expiry by the server clock; negative once expired.
    pub(crate) fn expires_in(&self) -> f64 {
        text::secs(self.expires_at - self.server_now)
    }

    /// `in 41s` for a held lease, `expired 5.0s ago` for a free one.
    pub(crate) fn expiry_text(&self) -> String {
        let secs = self.expires_in();
        if self.held() {
            format!("in {}", text::span(secs))
        } else {
            format!("expired {} ago", text::span(secs))
        }
    }

    /// `running 3m 12s of 15m` for a run in progress with a time limit,
    /// `running 3m 12s (no limit)` without one; `None` unless a run holds
    /// the lease.
    pub(crate) fn running_text(&self) -> Option<String> {
        let running = self.running_for()?;
        let limit = match self.run_timeout {
            Some(limit) => format!("of {}", leasehold_rules::format_duration(limit)),
            None => "(no limit)".to_owned(),
        };
        Some(format!("running {} {limit}", text::span(running.as_secs_f64())))
    }

    /// `now`, `in 4m 10s`, `3m 2s ago` (due since then), or `never` for a
    /// job that only runs when triggered.
    pub(crate) fn due_text(&self) -> String {
        match self.next_due_at {
            None => "now".to_owned(),
            Some(_) if self.due_only_when_triggered() => "never".to_owned(),
            Some(due) => text::relative(text::secs(due - self.server_now)),
        }
    }
}

/// One lease in `--json` output (`status`, and `forget` of a held lease).
#[derive(Serialize)]
pub(crate) struct LeaseJson<'a> {
    key: &'a str,
    /// The job the key belongs to (`null` on rows no runtime of schema 3
    /// has registered or claimed yet).
    job_name: Option<&'a str>,
    /// The holder, or the last holder of a free lease.
    holder: &'a str,
    fence: i64,
    /// `held`, `free`, or `never-run` (registered, never claimed: holder
    /// and fence are placeholders); in `status`, `removed` for a removed
    /// key of a job kind that is not held.
    pub(crate) state: &'static str,
    acquired_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    /// Negative once expired (or released).
    expires_in_seconds: f64,
    /// `null`: due now (never scheduled). Year 9999: only when triggered.
    next_due_at: Option<DateTime<Utc>>,
    /// Negative when already due; `null` with `next_due_at`.
    due_in_seconds: Option<f64>,
    /// How long the run in progress has been going (server clock); `null`
    /// unless a runtime's run holds the lease.
    running_for_seconds: Option<f64>,
    /// The time limit of the run in progress (`JobSettings::timeout`);
    /// `null` without a run in progress or without a limit.
    timeout_seconds: Option<f64>,
}

impl Row {
    pub(crate) fn json(&self) -> LeaseJson<'_> {
        LeaseJson {
            key: &self.key,
            job_name: self.job_name.as_deref(),
            holder: &self.holder,
            fence: self.fence,
            state: self.state().as_str(),
            acquired_at: self.acquired_at,
            expires_at: self.expires_at,
            expires_in_seconds: self.expires_in(),
            next_due_at: self.next_due_at,
            due_in_seconds: self.next_due_at.map(|due| text::secs(due - self.server_now)),
            running_for_seconds: self.running_for().map(|d| d.as_secs_f64()),
            timeout_seconds: self.running_for().and(self.run_timeout).map(|d| d.as_secs_f64()),
        }
    }
}

/// A pause in `--json` output (`status`, `pause`).
#[derive(Serialize)]
pub(crate) struct PauseJson<'a> {
    /// `key` or `job`.
    pub(crate) scope: &'static str,
    /// The key or the job name.
    pub(crate) name: &'a str,
    /// Runs in progress are cancelled at their next renewal.
    pub(crate) cancel: bool,
    pub(crate) paused_by: &'a str,
    pub(crate) paused_at: DateTime<Utc>,
    /// Keys with a lease row that it covers.
    pub(crate) keys: u64,
    /// Of those, how many were held (running) when read.
    pub(crate) running: u64,
}

impl<'a> From<&'a Pause> for PauseJson<'a> {
    fn from(pause: &'a Pause) -> Self {
        PauseJson {
            scope: pause.target.scope(),
            name: pause.target.name(),
            cancel: pause.cancel,
            paused_by: &pause.paused_by,
            paused_at: pause.paused_at,
            keys: pause.keys,
            running: pause.running,
        }
    }
}

/// A fleet-wide limit in `--json` output (`status`, `limit list`, `limit
/// set`).
#[derive(Serialize)]
pub(crate) struct LimitJson<'a> {
    /// The job or job kind it limits.
    pub(crate) job: &'a str,
    /// At most this many runs at once, across the fleet.
    pub(crate) limit: u32,
    /// Runs in progress holding a place (above `limit` after it was
    /// lowered: runs in progress are not stopped).
    pub(crate) running: u32,
    /// Keys of the job due, free and not paused: waiting for a place.
    pub(crate) waiting: u64,
    /// When the longest-waiting key fell due (`null`: none waits).
    pub(crate) waiting_since: Option<DateTime<Utc>>,
    /// How long it has waited, by the server clock (`null`: none waits).
    pub(crate) longest_wait_seconds: Option<f64>,
    pub(crate) set_by: &'a str,
    pub(crate) set_at: DateTime<Utc>,
}

impl<'a> From<&'a FleetLimit> for LimitJson<'a> {
    fn from(limit: &'a FleetLimit) -> Self {
        LimitJson {
            job: &limit.job,
            limit: limit.limit,
            running: limit.running,
            waiting: limit.waiting,
            waiting_since: limit.waiting_since,
            longest_wait_seconds: limit.longest_wait().map(|d| d.as_secs_f64()),
            set_by: &limit.set_by,
            set_at: limit.set_at,
        }
    }
}

/// The table of fleet-wide limits (`status`, `limit list`): each job with
/// its runs in progress against its limit, its keys waiting and the
/// longest wait.
pub(crate) fn render_limits(limits: &[FleetLimit]) -> String {
    let header = [
        ("JOB", Align::Left),
        ("RUNNING", Align::Right),
        ("LIMIT", Align::Right),
        ("WAITING", Align::Right),
        ("LONGEST WAIT", Align::Left),
        ("SET BY", Align::Left),
        ("SINCE", Align::Left),
    ];
    let cells: Vec<Vec<String>> = limits
        .iter()
        .map(|l| {
            vec![
                text::cell(&l.job),
                l.running.to_string(),
                l.limit.to_string(),
                l.waiting.to_string(),
                l.longest_wait()
                    .map_or_else(|| "-".to_owned(), |d| text::span(d.as_secs_f64())),
                text::cell(&l.set_by),
                format!(
                    "{} ({})",
                    text::time(l.set_at),
                    text::relative(text::secs(l.set_at - l.server_now))
                ),
            ]
        })
        .collect();
    text::table(&header, &cells)
}

/// What the table of limits needs said below it: a limit lowered under its
/// runs in progress; nothing otherwise.
pub(crate) fn limits_note(limits: &[FleetLimit]) -> String {
    let over: Vec<String> = limits
        .iter()
        .filter(|l| l.running > l.limit)
        .map(|l| text::cell(&l.job))
        .collect();
    if over.is_empty() {
        return String::new();
    }
    format!(
        "more runs than the limit of {}: it was lowered while they ran; they finish, and no new run starts until \
         fewer run than the limit\n",
        over.join(", ")
    )
}
