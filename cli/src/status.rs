//! `leasehold status`: every lease as the server sees it now, whether it is
//! paused, its latest runs, the pauses in force, and the fleet-wide limits
//! with their runs in progress and keys waiting.
//!
//! All read through the library (`Records::list`, `Controls::pauses`,
//! `Controls::limits`):
//! the CLI sends no SQL of its own for them.
//!
//! A lease is **held** while its `expires_at` is after the server clock, and
//! **free** otherwise. A released lease keeps its last holder and expires at
//! the moment of release, so from the row alone "released" and "expired"
//! look the same: both are free, shown with how long ago they ended.
//!
//! A lease row whose key of a job kind was removed (and not added again)
//! is **removed**, not free, once no run holds it (`KeyStatus::state`, the
//! library's rule): no replica runs it; `leasehold forget KEY` drops it.

use chrono::{DateTime, Utc};
use leasehold::{
    operator::{FleetLimit, Pause, Target},
    store::{KeyState, KeyStatus, KindStatus, LeaseStore, RunRecord},
};
use serde::Serialize;

use crate::db::Db;
use crate::failure::Failure;
use crate::ops::{LeaseJson, LimitJson, PauseJson, Row, limits_note, render_limits};
use crate::out;
use crate::runs;
use crate::text::{self, Align};

/// Arguments of `leasehold status`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Only leases whose key starts with this prefix.
    #[arg(long, value_name = "P")]
    prefix: Option<String>,
}

/// One key as `status` shows it: its lease row, whether it is paused, and
/// its latest runs (all from `Records::list`).
pub(crate) struct Entry {
    pub(crate) row: Row,
    pub(crate) paused: bool,
    /// `KeyState::Removed`: a removed key of a job kind, not held.
    pub(crate) removed: bool,
    pub(crate) last: Option<RunRecord>,
    pub(crate) last_success: Option<RunRecord>,
    pub(crate) last_error: Option<RunRecord>,
}

impl From<KeyStatus> for Entry {
    fn from(status: KeyStatus) -> Entry {
        Entry {
            removed: status.state() == KeyState::Removed,
            row: Row(status.lease),
            paused: status.paused,
            last: status.last,
            last_success: status.last_success,
            last_error: status.last_error,
        }
    }
}

impl Entry {
    /// `held`, `free`, `never-run`, with `, running 3m 12s of 15m` while
    /// a run holds it and `, paused` when it is; `removed`.
    fn state_text(&self) -> String {
        if self.removed {
            return KeyState::Removed.to_string();
        }
        let mut text = self.row.state().to_string();
        if let Some(running) = self.row.running_text() {
            text.push_str(", ");
            text.push_str(&running);
        }
        if self.paused {
            text.push_str(", paused");
        }
        text
    }

    /// `succeeded 41s ago`, `cancelled (paused) 3m 2s ago`, or `-`.
    fn last_text(&self) -> String {
        match &self.last {
            Some(run) => format!(
                "{} {}",
                runs::outcome_text(run),
                text::relative(text::secs(run.ended_at - self.row.server_now))
            ),
            None => "-".to_owned(),
        }
    }

    /// `41s ago`; `never` when runs are recorded but none succeeded; `-`
    /// without any run.
    fn last_success_text(&self) -> String {
        match (&self.last_success, &self.last) {
            (Some(run), _) => text::relative(text::secs(run.ended_at - self.row.server_now)),
            (None, Some(_)) => "never".to_owned(),
            (None, None) => "-".to_owned(),
        }
    }

    /// `2m 3s ago: connection refused` (the table cuts it), or `-`.
    fn last_error_text(&self) -> String {
        match &self.last_error {
            Some(run) => format!(
                "{}: {}",
                text::relative(text::secs(run.ended_at - self.row.server_now)),
                match run.error.as_deref() {
                    Some(message) => text::one_line(message),
                    None => runs::outcome_text(run),
                }
            ),
            None => "-".to_owned(),
        }
    }

    fn json(&self) -> EntryJson<'_> {
        let mut lease = self.row.json();
        if self.removed {
            lease.state = KeyState::Removed.as_str();
        }
        EntryJson {
            lease,
            paused: self.paused,
            removed: self.removed,
            last_run: self.last.as_ref().map(runs::RunJson::from),
            last_success_at: self.last_success.as_ref().map(|run| run.ended_at),
            last_error: self.last_error.as_ref().map(|run| ErrorJson {
                at: run.ended_at,
                run_no: run.run_no,
                outcome: run.outcome.as_str(),
                message: run.error.as_deref(),
            }),
        }
    }
}

/// `status --json`.
#[derive(Serialize)]
struct StatusJson<'a> {
    server_now: DateTime<Utc>,
    leases: Vec<EntryJson<'a>>,
    /// The pauses in force (with `--prefix`, those that cover a listed key
    /// or a key with the prefix).
    pauses: Vec<PauseJson<'a>>,
    /// The fleet-wide limits in force (with `--prefix`, those of a listed
    /// key's job), each with its runs in progress and keys waiting.
    limits: Vec<LimitJson<'a>>,
    /// The job kinds that stored keys or replicas named.
    kinds: Vec<KindJson<'a>>,
}

/// A job kind in `status --json`.
#[derive(Serialize)]
struct KindJson<'a> {
    kind: &'a str,
    /// Its stored keys.
    keys: i64,
    /// Whether a live replica registers it (`false`: its keys run nowhere).
    live: bool,
    /// Keys whose arguments a replica cannot read: not run until updated.
    bad_args: i64,
}

/// One key in `status --json`: the lease's fields, then the operators'.
#[derive(Serialize)]
struct EntryJson<'a> {
    #[serde(flatten)]
    lease: LeaseJson<'a>,
    /// Paused by its own name or by its job: no replica claims it.
    paused: bool,
    /// A removed key of a job kind (its `state` is `removed`): no replica
    /// runs it; `leasehold forget KEY` drops its row and history.
    removed: bool,
    /// The latest recorded run (`null` when none is).
    last_run: Option<runs::RunJson<'a>>,
    /// When the latest successful run ended.
    last_success_at: Option<DateTime<Utc>>,
    /// The latest run that failed or panicked.
    last_error: Option<ErrorJson<'a>>,
}

#[derive(Serialize)]
struct ErrorJson<'a> {
    /// When that run ended.
    at: DateTime<Utc>,
    run_no: i64,
    /// `failed` or `panicked`.
    outcome: &'static str,
    /// The job's error or panic message, in full (as recorded: at most
    /// 2,000 bytes).
    message: Option<&'a str>,
}

pub(crate) async fn run(db: &Db, args: &Args) -> Result<(), Failure> {
    db.require_schema().await?;
    let store = LeaseStore::new(db.pool.clone());
    let prefix = args.prefix.as_deref().unwrap_or("");
    let entries: Vec<Entry> = store
        .records()
        .list(prefix)
        .await
        .map_err(|e| db.failure(e))?
        .into_iter()
        .map(Entry::from)
        .collect();
    let pauses = store.controls().pauses().await.map_err(|e| db.failure(e))?;
    let pauses = relevant_pauses(pauses, &entries, args.prefix.as_deref());
    let limits = store.controls().limits().await.map_err(|e| db.failure(e))?;
    let limits = relevant_limits(limits, &entries, args.prefix.as_deref());
    let kinds = store.keys().kinds().await.map_err(|e| db.failure(e))?;
    let server_now = match entries.first() {
        Some(entry) => entry.row.server_now,
        None => db.server_now().await?,
    };
    if args.json {
        let doc = StatusJson {
            server_now,
            leases: entries.iter().map(Entry::json).collect(),
            pauses: pauses.iter().map(PauseJson::from).collect(),
            limits: limits.iter().map(LimitJson::from).collect(),
            kinds: kinds
                .iter()
                .map(|k| KindJson {
                    kind: &k.kind,
                    keys: k.keys,
                    live: k.live,
                    bad_args: k.bad_args,
                })
                .collect(),
        };
        out::json(&doc)?;
        return Ok(());
    }
    out::print(format_args!(
        "{}",
        render(
            &entries,
            &pauses,
            server_now,
            args.prefix.as_deref(),
            text::terminal_width()
        )
    ))?;
    out::print(render_fleet_limits(&limits))?;
    out::print(render_kinds(&kinds))?;
    Ok(())
}

/// The `job kinds` table, and what is wrong with them; nothing without
/// kinds.
fn render_kinds(kinds: &[KindStatus]) -> String {
    if kinds.is_empty() {
        return String::new();
    }
    let header = [
        ("KIND", Align::Left),
        ("KEYS", Align::Right),
        ("RUN BY", Align::Left),
        ("BAD ARGS", Align::Right),
    ];
    let cells: Vec<Vec<String>> = kinds
        .iter()
        .map(|k| {
            vec![
                text::cell(&k.kind),
                k.keys.to_string(),
                if k.live {
                    "live replicas"
                } else {
                    "UNKNOWN: no live replica"
                }
                .to_owned(),
                k.bad_args.to_string(),
            ]
        })
        .collect();
    let mut out = format!("\n{}:\n", text::plural(kinds.len() as u64, "job kind"));
    out.push_str(&text::table(&header, &cells));
    let unknown: i64 = kinds.iter().filter(|k| !k.live).map(|k| k.keys).sum();
    if unknown > 0 {
        out.push_str(&format!(
            "{} of a kind no live replica registers: they run nowhere (deploy the kind, or `leasehold remove`)\n",
            text::plural(unknown as u64, "key")
        ));
    }
    let bad: i64 = kinds.iter().map(|k| k.bad_args).sum();
    if bad > 0 {
        out.push_str(&format!(
            "{} whose arguments a replica cannot read: not run until `leasehold update` (see the replica's ERROR log)\n",
            text::plural(bad as u64, "key")
        ));
    }
    out
}

/// All pauses; with a prefix, those of keys with the prefix and those of
/// jobs that a listed key belongs to.
fn relevant_pauses(pauses: Vec<Pause>, entries: &[Entry], prefix: Option<&str>) -> Vec<Pause> {
    let Some(prefix) = prefix else {
        return pauses;
    };
    pauses
        .into_iter()
        .filter(|pause| {
            // A key pause under the prefix counts even before its key has a row.
            (matches!(pause.target, Target::Key(_)) && pause.target.name().starts_with(prefix))
                || entries
                    .iter()
                    .any(|e| pause.target.covers(&e.row.key, e.row.job_name.as_deref()))
        })
        .collect()
}

/// All limits; with a prefix, those of the jobs a listed key belongs to.
fn relevant_limits(limits: Vec<FleetLimit>, entries: &[Entry], prefix: Option<&str>) -> Vec<FleetLimit> {
    if prefix.is_none() {
        return limits;
    }
    limits
        .into_iter()
        .filter(|limit| entries.iter().any(|e| e.row.job_name.as_deref() == Some(&limit.job)))
        .collect()
}

/// The `fleet-wide limits` table and what it needs said; nothing without
/// limits.
fn render_fleet_limits(limits: &[FleetLimit]) -> String {
    if limits.is_empty() {
        return String::new();
    }
    format!(
        "\n{} (at most N runs of a job at once across the fleet; `leasehold limit` changes one):\n{}{}",
        text::plural(limits.len() as u64, "fleet-wide limit"),
        render_limits(limits),
        limits_note(limits)
    )
}

/// The `pauses in force` table.
pub(crate) fn render_pauses(pauses: &[Pause], server_now: DateTime<Utc>) -> String {
    let header = [
        ("PAUSED", Align::Left),
        ("BY", Align::Left),
        ("SINCE", Align::Left),
        ("CANCEL", Align::Left),
        ("KEYS", Align::Right),
        ("RUNNING", Align::Right),
    ];
    let cells: Vec<Vec<String>> = pauses
        .iter()
        .map(|p| {
            vec![
                text::cell(&p.target.to_string()),
                text::cell(&p.paused_by),
                format!(
                    "{} ({})",
                    text::time(p.paused_at),
                    text::relative(text::secs(p.paused_at - server_now))
                ),
                if p.cancel { "yes" } else { "no" }.to_owned(),
                p.keys.to_string(),
                p.running.to_string(),
            ]
        })
        .collect();
    text::table(&header, &cells)
}

/// Widest `LAST ERROR` cell when the terminal's width is unknown.
const LAST_ERROR_CHARS: usize = 40;

fn render(
    entries: &[Entry],
    pauses: &[Pause],
    server_now: DateTime<Utc>,
    prefix: Option<&str>,
    width: Option<usize>,
) -> String {
    let held = entries.iter().filter(|e| e.row.held()).count();
    let removed = entries.iter().filter(|e| e.removed).count();
    let paused = entries.iter().filter(|e| e.paused && !e.removed).count();
    let scope = match prefix {
        Some(p) => format!(" with prefix {}", text::cell(&format!("{p:?}"))),
        None => String::new(),
    };
    let mut out = format!(
        "server time {}: {} lease{}{scope} ({held} held, {} free{}{})\n",
        text::time(server_now),
        entries.len(),
        if entries.len() == 1 { "" } else { "s" },
        entries.len() - held - removed,
        if paused > 0 {
            format!(", {paused} paused")
        } else {
            String::new()
        },
        if removed > 0 {
            format!(", {removed} removed")
        } else {
            String::new()
        },
    );
    if !entries.is_empty() {
        out.push('\n');
        let header = [
            ("KEY", Align::Left),
            ("STATE", Align::Left),
            ("HOLDER", Align::Left),
            ("FENCE", Align::Right),
            ("ACQUIRED", Align::Left),
            ("EXPIRES", Align::Left),
            ("NEXT DUE", Align::Left),
            ("JOB", Align::Left),
            ("LAST RUN", Align::Left),
            ("LAST SUCCESS", Align::Left),
            ("LAST ERROR", Align::Left),
        ];
        let cells: Vec<Vec<String>> = entries
            .iter()
            .map(|e| {
                let r = &e.row;
                let none = || "-".to_owned();
                let mut cells = if r.never_run() {
                    vec![text::cell(&r.key), e.state_text(), none(), none(), none(), none()]
                } else {
                    vec![
                        text::cell(&r.key),
                        e.state_text(),
                        text::cell(&r.holder),
                        r.fence.to_string(),
                        text::time(r.acquired_at),
                        r.expiry_text(),
                    ]
                };
                cells.extend([
                    r.due_text(),
                    r.job_name.as_deref().map_or_else(none, text::cell),
                    e.last_text(),
                    e.last_success_text(),
                    e.last_error_text(),
                ]);
                cells
            })
            .collect();
        out.push_str(&text::table_fitted(&header, cells, width, LAST_ERROR_CHARS));
    }
    if removed > 0 {
        out.push_str(&format!(
            "{} of job kinds removed: not run anywhere; `leasehold forget KEY` drops a key's record (its history \
             stays readable until then, marked \"{}\")\n",
            text::plural(removed as u64, "key"),
            runs::EARLIER_LIFE
        ));
    }
    if !pauses.is_empty() {
        out.push_str(&format!(
            "\n{} in force (no replica claims a paused key; `leasehold resume` lifts one):\n",
            text::plural(pauses.len() as u64, "pause")
        ));
        out.push_str(&render_pauses(pauses, server_now));
    }
    out
}
