//! `leasehold add|update|remove KIND KEY`: the keys of job kinds, stored
//! once and run by every replica that registers the kind, through
//! `leasehold::operator::Operator` (recorded in the key's history, whose words the
//! CLI prints; no SQL of its own).

use leasehold::{
    CatchUp, Key, NewKey, Schedule,
    operator::{OperatorAction, Target},
};
use serde::Serialize;

use crate::db::Db;
use crate::failure::{Failure, KeyArg, check_name};
use crate::ops::{operator, said};
use crate::out;
use crate::text;

/// A key's kind and name.
#[derive(Debug, clap::Args)]
pub(crate) struct KeyArgs {
    /// The job kind (the name its `JobKind` gives).
    kind: String,
    /// The lease key.
    #[arg(value_parser = KeyArg)]
    key: Key,
    /// Print the outcome as JSON on standard output (in every outcome; the
    /// exit code is the same as without --json).
    #[arg(long)]
    json: bool,
}

/// `--json` output of `add`, `update` and `remove`.
#[derive(Serialize)]
struct KeyJson<'a> {
    kind: &'a str,
    key: &'a str,
    /// `added` or `exists` (add), `updated` or `not-found` (update),
    /// `removed` or `not-found` (remove).
    outcome: &'static str,
    /// The key's new arguments version, for `updated`.
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<i64>,
}

impl KeyArgs {
    /// Prints the outcome as JSON when --json was given.
    fn json(&self, outcome: &'static str, version: Option<i64>) -> Result<(), Failure> {
        if !self.json {
            return Ok(());
        }
        out::json(&KeyJson {
            kind: &self.kind,
            key: &self.key,
            outcome,
            version,
        })
    }
}

/// The arguments and schedule of `add` and `update`.
#[derive(Debug, clap::Args)]
pub(crate) struct DefineArgs {
    #[command(flatten)]
    key: KeyArgs,
    /// The key's arguments, as JSON (the kind's `Args`), e.g. '{"tenant": 42}'.
    #[arg(long, value_name = "JSON")]
    args: String,
    /// Run every DURATION (e.g. 30s, 5m, 1h30m).
    #[arg(long, value_name = "DURATION", conflicts_with_all = ["cron", "manual"])]
    every: Option<String>,
    /// Run at the times a cron expression matches (5 fields, or 6 with seconds).
    #[arg(long, value_name = "EXPR", conflicts_with = "manual")]
    cron: Option<String>,
    /// The IANA time zone the cron expression is read in (default UTC).
    #[arg(long, value_name = "ZONE", requires = "cron")]
    tz: Option<String>,
    /// Run only when triggered (`leasehold trigger KEY`).
    #[arg(long)]
    manual: bool,
    /// Slots missed while no replica ran the key: once, skip or all(N).
    #[arg(long, value_name = "POLICY", default_value = "once")]
    catch_up: String,
    /// The key's own time limit per run (100ms to 168h), in place of its
    /// kind's: a run still going at it is cancelled (reason timeout).
    #[arg(long, value_name = "DURATION")]
    timeout: Option<String>,
}

impl KeyArgs {
    pub(crate) fn validate(&self) -> Result<(), Failure> {
        // The key was checked as it was parsed (`KeyArg`).
        check_name("job kind", &self.kind)
    }
}

impl DefineArgs {
    /// The key to send, with every check of it (its name by the rule for a
    /// key a row is made for, its arguments, schedule and limit) made
    /// before anything is sent, or even connected (`run`, in `main.rs`).
    pub(crate) fn checked(&self) -> Result<NewKey, Failure> {
        check_name("job kind", &self.key.kind)?;
        self.new_key()
    }

    /// The schedule in its text form (`leasehold::Schedule`'s), so it is
    /// read by the library's one parser.
    fn schedule(&self) -> Result<Schedule, Failure> {
        let text = match (&self.every, &self.cron, &self.tz, self.manual) {
            (Some(every), None, None, false) => format!("every {every}"),
            (None, Some(cron), None, false) => format!("cron {cron}"),
            (None, Some(cron), Some(tz), false) => format!("cron {cron} in {tz}"),
            (None, None, None, true) => "manual".to_owned(),
            _ => {
                return Err(Failure::usage(
                    "give the schedule: --every DURATION, --cron EXPR [--tz ZONE] or --manual",
                ));
            }
        };
        text.parse()
            .map_err(|e: leasehold::Error| Failure::usage(e.to_string()))
    }

    fn new_key(&self) -> Result<NewKey, Failure> {
        let args: serde_json::Value = serde_json::from_str(&self.args)
            .map_err(|e| Failure::usage(format!("--args {}: not JSON: {e}", text::cell(&self.args))))?;
        let catch_up: CatchUp = self
            .catch_up
            .parse()
            .map_err(|e: leasehold::Error| Failure::usage(e.to_string()))?;
        let key = NewKey::new(&self.key.kind, &self.key.key, &args, self.schedule()?)
            .map_err(|e| Failure::usage(e.to_string()))?
            .catch_up(catch_up);
        let Some(text) = &self.timeout else {
            return Ok(key);
        };
        let limit = leasehold_rules::parse_duration(text.trim())
            .map_err(|e| Failure::usage(format!("--timeout {}: {e}", text::cell(text))))
            .and_then(|limit| {
                leasehold_rules::run_timeout("run timeout", limit).map_err(|e| Failure::usage(e.to_string()))
            })?;
        Ok(key.timeout(limit))
    }
}

/// `leasehold add` of `key` (`DefineArgs::checked`): exits 3 if the key
/// exists (use `update`).
pub(crate) async fn add(db: &Db, args: &DefineArgs, key: NewKey) -> Result<(), Failure> {
    let added = operator(db)?
        .add_keys(std::slice::from_ref(&key))
        .await
        .map_err(|e| db.failure(e))?;
    let line = said(
        OperatorAction::Add,
        &Target::from(key.key().clone()),
        leasehold::operator::added(&key, added, 1),
    );
    args.key.json(if added == 0 { "exists" } else { "added" }, None)?;
    if added == 0 {
        return Err(Failure::refused(format!(
            "{line}; it keeps its arguments and schedule (change them with `leasehold update`)"
        )));
    }
    if !args.key.json {
        out::line(&line)?;
    }
    Ok(())
}

/// `leasehold update` of `key` (`DefineArgs::checked`): exits 4 if there
/// is no such key of the kind.
pub(crate) async fn update(db: &Db, args: &DefineArgs, key: NewKey) -> Result<(), Failure> {
    let version = operator(db)?.update_key(&key).await.map_err(|e| db.failure(e))?;
    let line = said(
        OperatorAction::Update,
        &Target::from(key.key().clone()),
        leasehold::operator::updated(&key, version),
    );
    args.key
        .json(if version.is_some() { "updated" } else { "not-found" }, version)?;
    if version.is_none() {
        return Err(Failure::not_found(format!(
            "{line} in {} (see `leasehold status`)",
            db.name
        )));
    }
    if !args.key.json {
        out::line(&line)?;
    }
    Ok(())
}

/// `leasehold remove`: exits 4 if there is no such key of the kind.
pub(crate) async fn remove(db: &Db, args: &KeyArgs) -> Result<(), Failure> {
    let removed = operator(db)?
        .remove_key(&args.kind, &args.key)
        .await
        .map_err(|e| db.failure(e))?;
    let line = said(
        OperatorAction::Remove,
        &Target::from(args.key.clone()),
        leasehold::operator::removed(&args.kind, removed),
    );
    args.json(if removed { "removed" } else { "not-found" }, None)?;
    if !removed {
        return Err(Failure::not_found(format!(
            "{line} in {} (see `leasehold status`)",
            db.name
        )));
    }
    if !args.json {
        out::line(&line)?;
    }
    Ok(())
}
