//! `leasehold pause` and `leasehold resume`: stop and restart a key, or
//! every key of a job, for the whole fleet.
//!
//! Through `leasehold::operator::Operator::{pause, resume}` (and
//! `LeaseStore::{pauses, get}` to say what still holds a resumed key): a
//! pause is a row the claims check, so every replica obeys it, restarts
//! included. The pause and its record in the key's history are one
//! statement. The CLI sends no SQL of its own for them, and says each
//! outcome in the library's words (as the key's history records it).

use leasehold::{
    Key,
    operator::{OperatorAction, Pause, Resumed, Target},
    store::LeaseStore,
};
use serde::Serialize;

use crate::db::Db;
use crate::failure::Failure;
use crate::failure::{KeyArg, check_actor, check_name};
use crate::ops::{self, PauseJson, default_by, said};
use crate::out;
use crate::text;

/// What to pause or resume: a key, or a job's keys (exactly one).
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub(crate) struct TargetArgs {
    /// The lease key.
    #[arg(value_parser = KeyArg)]
    key: Option<Key>,
    /// Every key of the job with this name (`FencedJob::name`), including
    /// keys registered later.
    #[arg(long, value_name = "NAME")]
    job: Option<String>,
}

impl TargetArgs {
    fn validate(&self) -> Result<(), Failure> {
        match (&self.key, &self.job) {
            // The key was checked as it was parsed (`KeyArg`).
            (Some(_), None) => Ok(()),
            (None, Some(job)) => check_name("job name", job),
            // clap's group makes this unreachable; say so plainly anyway.
            _ => Err(Failure::usage("name exactly one of KEY or --job NAME")),
        }
    }

    /// The target, its name checked by [`validate`](Self::validate)
    /// before anything was sent (`run`, in `main.rs`), and trusted after.
    fn target(&self) -> Result<Target, Failure> {
        match (&self.key, &self.job) {
            (Some(key), None) => Ok(Target::from(key.clone())),
            (None, Some(job)) => Ok(Target::job(job.as_str())),
            _ => Err(Failure::usage("name exactly one of KEY or --job NAME")),
        }
    }
}

/// The target as the operator would type it again: `KEY` or `--job NAME`.
fn as_args(target: &Target) -> String {
    let name = target.name();
    match target.scope() {
        "job" => format!("--job {}", text::shell_word(name)),
        _ if name.starts_with('-') => format!("-- {}", text::shell_word(name)),
        _ => text::shell_word(name),
    }
}

/// Arguments of `leasehold pause`.
#[derive(Debug, clap::Args)]
pub(crate) struct PauseArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Also stop the runs in progress, at their next renewal (reason
    /// `paused`); without it they finish.
    #[arg(long)]
    cancel: bool,
    /// Who pauses, shown by `status` (default: `$USER@<hostname>`).
    #[arg(long, value_name = "WHO")]
    by: Option<String>,
    /// Print the pause as JSON.
    #[arg(long)]
    json: bool,
}

impl PauseArgs {
    /// Checks the names before anything is sent (or even connected).
    pub(crate) fn validate(&self) -> Result<(), Failure> {
        self.target.validate()?;
        if let Some(by) = &self.by {
            check_actor("--by", by)?;
        }
        Ok(())
    }
}

#[derive(Serialize)]
struct PausedJson<'a> {
    #[serde(flatten)]
    pause: PauseJson<'a>,
    /// It was paused before this command (its first author and time are
    /// kept; `--cancel` is added).
    already_paused: bool,
}

pub(crate) async fn pause(db: &Db, args: &PauseArgs) -> Result<(), Failure> {
    let target = args.target.target()?;
    // Through `Operator`, so the key's history records who paused it. One
    // statement: it checks the schema version, pauses, says whether it was
    // paused already and records the action.
    let operator = ops::operator_by(db, args.by.clone().unwrap_or_else(default_by))?;
    let pause = operator.pause(&target, args.cancel).await.map_err(|e| db.failure(e))?;
    if args.json {
        let doc = PausedJson {
            pause: PauseJson::from(&pause),
            already_paused: pause.already_paused.is_some(),
        };
        out::json(&doc)?;
        return Ok(());
    }
    out::print(format_args!("{}", pause_text(&pause, args.cancel)))?;
    Ok(())
}

/// What `pause` (with `--cancel` if `cancel`) prints: the library's words
/// for the pause (as the history records them), then who paused it and
/// since when, what happens to the runs in progress, and how to undo it.
fn pause_text(pause: &Pause, cancel: bool) -> String {
    let action = if cancel {
        OperatorAction::PauseCancel
    } else {
        OperatorAction::Pause
    };
    let mut out = format!("{}\n", said(action, &pause.target, pause));
    let by = format!(
        "by {} since {}",
        text::cell(&pause.paused_by),
        text::time(pause.paused_at)
    );
    out.push_str(&match pause.already_paused {
        None => format!("  paused for the whole fleet {by}\n"),
        Some(cancelled_before) if pause.cancel && !cancelled_before => {
            format!("  it was already paused {by}; now its runs in progress are cancelled too\n")
        }
        Some(_) => format!("  it was already paused {by}; nothing changed\n"),
    });
    match (pause.running, pause.cancel) {
        (0, _) => {}
        (1, false) => out.push_str("  the run in progress finishes (use --cancel to stop it at its next renewal)\n"),
        (_, false) => out.push_str("  the runs in progress finish (use --cancel to stop them at their next renewal)\n"),
        (1, true) => out.push_str("  the run in progress is cancelled at its next renewal (reason paused)\n"),
        (_, true) => out.push_str("  the runs in progress are cancelled at their next renewal (reason paused)\n"),
    }
    if pause.keys == 0 {
        let why = match pause.target.scope() {
            "job" => "no lease row names this job yet (a runtime records it when it registers or claims a key)",
            _ => "no replica has registered this key yet",
        };
        out.push_str(&format!(
            "  warning: {why}: check the spelling; the pause applies to keys registered later\n"
        ));
    }
    out.push_str(&format!(
        "  no replica claims {} until `leasehold resume {}`; slots that pass meanwhile are missed (each job's catch-up policy decides what runs on resume)\n",
        if pause.target.scope() == "job" { "its keys" } else { "it" },
        as_args(&pause.target)
    ));
    out
}

/// Arguments of `leasehold resume`.
#[derive(Debug, clap::Args)]
pub(crate) struct ResumeArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Print the outcome as JSON (in every outcome; the exit code is the
    /// same as without --json).
    #[arg(long)]
    json: bool,
}

impl ResumeArgs {
    /// Checks the names before anything is sent (or even connected).
    pub(crate) fn validate(&self) -> Result<(), Failure> {
        self.target.validate()
    }
}

#[derive(Serialize)]
struct ResumeJson<'a> {
    scope: &'static str,
    name: &'a str,
    /// `resumed` or `not-paused`.
    outcome: &'static str,
    /// Overdue keys made claimable now; absent for `not-paused`.
    #[serde(skip_serializing_if = "Option::is_none")]
    woken: Option<u64>,
    /// For a key: the job whose own pause still holds it (after `resumed`),
    /// or holds it instead (`not-paused`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    paused_by_job: Option<&'a str>,
}

pub(crate) async fn resume(db: &Db, args: &ResumeArgs) -> Result<(), Failure> {
    let target = args.target.target()?;
    let store = LeaseStore::new(db.pool.clone());
    let operator = ops::operator(db)?;
    let resumed = operator.resume(&target).await.map_err(|e| db.failure(e))?;
    let job_pause = job_pause_of_key(db, &store, &target).await?;
    let job_note = |job: &str| {
        format!(
            "its job {} is paused too (`leasehold resume --job {}`)",
            text::cell(&format!("{job:?}")),
            text::shell_word(job)
        )
    };
    let line = said(OperatorAction::Resume, &target, resumed);
    match resumed {
        Resumed::Yes { woken } => {
            if args.json {
                print_json(&ResumeJson {
                    scope: target.scope(),
                    name: target.name(),
                    outcome: "resumed",
                    woken: Some(woken),
                    paused_by_job: job_pause.as_deref(),
                })?;
                return Ok(());
            }
            out::line(&line)?;
            let key = target.scope() == "key";
            match (&job_pause, key, woken) {
                (Some(job), _, _) => out::line(format_args!("  but it stays paused: {}", job_note(job)))?,
                (None, true, 0) => out::line(format_args!("  it runs at its next slot"))?,
                (None, true, _) => out::line(format_args!(
                    "  it is claimable now (its job's catch-up policy decides what runs)"
                ))?,
                (None, false, 0) => out::line(format_args!("  each key runs at its next slot"))?,
                (None, false, _) => out::line(format_args!(
                    "  the overdue keys are claimable now (the job's catch-up policy decides what runs); the others \
                     run at their next slot"
                ))?,
            }
            Ok(())
        }
        Resumed::NotPaused => {
            if args.json {
                print_json(&ResumeJson {
                    scope: target.scope(),
                    name: target.name(),
                    outcome: "not-paused",
                    woken: None,
                    paused_by_job: job_pause.as_deref(),
                })?;
            }
            Err(Failure::not_found(match &job_pause {
                Some(job) => format!(
                    "{line} by its own name in {}: it is paused through its job {} (`leasehold resume --job {}` \
                     lifts that, for every key of the job); nothing to resume",
                    db.name,
                    text::cell(&format!("{job:?}")),
                    text::shell_word(job)
                ),
                None => format!("{line} in {} (see `leasehold status`); nothing to resume", db.name),
            }))
        }
        // An outcome of a newer library that this CLI does not know.
        other => Err(Failure::error(format!(
            "{line}: the library answered {other:?}, which this CLI does not know: upgrade leasehold-cli (see \
             `leasehold status` for the pauses in force)"
        ))),
    }
}

/// For a key target: the key's job, if that job is paused (a key is also
/// paused through its job, which resuming the key does not lift).
async fn job_pause_of_key(db: &Db, store: &LeaseStore, target: &Target) -> Result<Option<String>, Failure> {
    if target.scope() != "key" {
        return Ok(None);
    }
    let Some(job) = store
        .get(target.name())
        .await
        .map_err(|e| db.failure(e))?
        .and_then(|info| info.job_name)
    else {
        return Ok(None);
    };
    let paused = store
        .controls()
        .pauses()
        .await
        .map_err(|e| db.failure(e))?
        .iter()
        .any(|p| p.target == Target::job(job.as_str()));
    Ok(paused.then_some(job))
}

fn print_json(doc: &impl Serialize) -> Result<(), Failure> {
    out::json(doc)?;
    Ok(())
}
