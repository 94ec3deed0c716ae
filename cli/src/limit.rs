//! `leasehold limit set|clear|list`: fleet-wide limits per job — at most N
//! runs of a job (or kind) at once across every replica.
//!
//! Through `leasehold::operator::Operator::{set_limit, clear_limit}` and
//! `leasehold::store::Controls::limits`: a limit is rows the claims take
//! places in, so every replica obeys it from its next claim, without a
//! restart. The CLI sends no SQL of its own. Lowering a limit never stops a
//! run in progress; it only holds new starts back until fewer runs than the
//! limit hold places.
//!
//! Setting and clearing are recorded on the job (actions `limit` and
//! `limit-clear`, shown by `leasehold history` with the job's other
//! actions), by `--by`, in the statement that changes the limit.

use leasehold::operator::{FleetLimit, LimitSet, MAX_FLEET_LIMIT};
use leasehold::store::LeaseStore;
use serde::Serialize;

use crate::db::Db;
use crate::failure::{Failure, check_actor, check_name};
use crate::ops::{self, LimitJson, default_by, limits_note, render_limits};
use crate::out;
use crate::text;

/// `leasehold limit`'s subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Allow at most N runs of a job (or kind) at once across the fleet,
    /// from every replica's next claim (no restart). Exits 4 if no key has
    /// that job or kind.
    ///
    /// Lowering a limit stops no run in progress: new runs wait until fewer
    /// than N run. A key that cannot start waits, and starts as soon as a
    /// place frees, oldest due first.
    Set(SetArgs),
    /// Lift a job's fleet-wide limit: its keys start as freely as any
    /// other's. Exits 4 if it has none.
    Clear(ClearArgs),
    /// Show the limits in force, each with its runs in progress, its keys
    /// waiting and the longest wait.
    List(ListArgs),
}

impl Command {
    /// Checks the arguments before anything is sent (or even connected).
    pub(crate) fn validate(&self) -> Result<(), Failure> {
        match self {
            Command::Set(args) => args.validate().map(drop),
            Command::Clear(args) => {
                check_name("job name", &args.job)?;
                match &args.by {
                    Some(by) => check_actor("--by", by),
                    None => Ok(()),
                }
            }
            Command::List(_) => Ok(()),
        }
    }

    pub(crate) async fn run(&self, db: &Db) -> Result<(), Failure> {
        match self {
            Command::Set(args) => set(db, args).await,
            Command::Clear(args) => clear(db, args).await,
            Command::List(args) => list(db, args).await,
        }
    }
}

/// Arguments of `leasehold limit set`.
#[derive(Debug, clap::Args)]
pub(crate) struct SetArgs {
    /// The job (`FencedJob::name`) or job kind to limit.
    job: String,
    /// At most this many runs at once, across every replica (1 to 10000).
    #[arg(value_name = "N", allow_negative_numbers = true)]
    limit: String,
    /// Who sets it, shown by `limit list` and recorded in the job's history
    /// (default: `$USER@<hostname>`).
    #[arg(long, value_name = "WHO")]
    by: Option<String>,
    /// Print the outcome as JSON (in every outcome; the exit code is the
    /// same as without --json).
    #[arg(long)]
    json: bool,
}

impl SetArgs {
    /// Checks the job, the limit and `--by`; the limit as a number.
    fn validate(&self) -> Result<u32, Failure> {
        check_name("job name", &self.job)?;
        let limit = parse_limit(&self.limit)?;
        if let Some(by) = &self.by {
            check_actor("--by", by)?;
        }
        Ok(limit)
    }
}

/// A limit as typed: a whole number from 1 to [`MAX_FLEET_LIMIT`]. The
/// error names the value and what to type instead.
fn parse_limit(value: &str) -> Result<u32, Failure> {
    let range = format!("give 1 to {MAX_FLEET_LIMIT} runs at once");
    let trimmed = value.trim();
    let number: i128 = match trimmed.parse() {
        Ok(number) => number,
        Err(_) if is_digits(trimmed.strip_prefix(['-', '+']).unwrap_or(trimmed)) => {
            // Digits, too many for any integer: absurd, not malformed.
            return Err(Failure::usage(format!(
                "invalid limit {}: too large; {range}",
                text::cell(value)
            )));
        }
        Err(_) => {
            return Err(Failure::usage(format!(
                "invalid limit {}: not a whole number; {range}",
                text::cell(&format!("{value:?}"))
            )));
        }
    };
    match u32::try_from(number) {
        Ok(0) => Err(Failure::usage(format!(
            "invalid limit 0: a job's limit is 1 to {MAX_FLEET_LIMIT} runs at once; to lift it, \
             `leasehold limit clear JOB` (a paused job runs nothing: `leasehold pause --job JOB`)"
        ))),
        Ok(limit) if limit <= MAX_FLEET_LIMIT => Ok(limit),
        _ if number < 0 => Err(Failure::usage(format!("invalid limit {number}: below 1; {range}"))),
        _ => Err(Failure::usage(format!(
            "invalid limit {number}: more than {MAX_FLEET_LIMIT}; {range}"
        ))),
    }
}

/// One or more ASCII digits.
fn is_digits(value: &str) -> bool {
    !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit())
}

/// Arguments of `leasehold limit clear`.
#[derive(Debug, clap::Args)]
pub(crate) struct ClearArgs {
    /// The job or job kind whose limit to lift.
    job: String,
    /// Who lifts it, as the job's history records it (default:
    /// `$USER@<hostname>`).
    #[arg(long, value_name = "WHO")]
    by: Option<String>,
    /// Print the outcome as JSON (in every outcome; the exit code is the
    /// same as without --json).
    #[arg(long)]
    json: bool,
}

/// Arguments of `leasehold limit list`.
#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// `limit set --json`.
#[derive(Serialize)]
struct SetJson<'a> {
    job: &'a str,
    /// `set` or `unknown-job` (nothing was set).
    outcome: &'static str,
    limit: u32,
    /// The limit it replaced (`null`: none); absent for `unknown-job`.
    #[serde(skip_serializing_if = "Option::is_none")]
    previous: Option<Option<u32>>,
    /// The limit as read back after it was set (`status --json`'s
    /// `limits`); absent for `unknown-job`.
    #[serde(skip_serializing_if = "Option::is_none")]
    now: Option<LimitJson<'a>>,
}

async fn set(db: &Db, args: &SetArgs) -> Result<(), Failure> {
    let limit = args.validate()?;
    let store = LeaseStore::new(db.pool.clone());
    let operator = ops::operator_by(db, args.by.clone().unwrap_or_else(default_by))?;
    let outcome = operator.set_limit(&args.job, limit).await.map_err(|e| db.failure(e))?;
    let job = text::cell(&format!("{:?}", args.job));
    let previous = match outcome {
        LimitSet::Set { previous } => previous,
        LimitSet::UnknownJob => {
            if args.json {
                out::json(&SetJson {
                    job: &args.job,
                    outcome: "unknown-job",
                    limit,
                    previous: None,
                    now: None,
                })?;
            }
            return Err(Failure::not_found(format!(
                "limit {job}: no key of a job or kind named {job} in {}: check the spelling (`leasehold status` \
                 lists each key's job, and the kinds); nothing was set",
                db.name
            )));
        }
        // An outcome of a newer library that this CLI does not know.
        other => {
            return Err(Failure::error(format!(
                "limit {job}: the library answered {other:?}, which this CLI does not know: upgrade \
                 leasehold-cli (see `leasehold limit list`)"
            )));
        }
    };
    let now = read_one(db, &store, &args.job).await?;
    if args.json {
        out::json(&SetJson {
            job: &args.job,
            outcome: "set",
            limit,
            previous: Some(previous),
            now: now.as_ref().map(LimitJson::from),
        })?;
        return Ok(());
    }
    out::print(set_text(&args.job, limit, previous, now.as_ref()))
}

/// What `limit set` prints: the change, what it does to runs in progress
/// and keys waiting, and how to watch and undo it.
fn set_text(job: &str, limit: u32, previous: Option<u32>, now: Option<&FleetLimit>) -> String {
    let runs = |n: u32| {
        if n == 1 {
            "1 run".to_owned()
        } else {
            format!("{n} runs")
        }
    };
    let was = match previous {
        None => "no limit before".to_owned(),
        Some(p) if p == limit => "unchanged".to_owned(),
        Some(p) => format!("was {p}"),
    };
    let mut out = format!(
        "{}: at most {} at once across the fleet ({was})\n",
        text::cell(job),
        runs(limit)
    );
    let running = now.map_or(0, |l| l.running);
    let waiting = now.map_or(0, |l| l.waiting);
    if running > limit {
        out.push_str(&format!(
            "  runs in progress are not stopped: {running} running now, above the limit; no new run starts until {} \
             of them end\n",
            running - limit + 1
        ));
    } else if previous.is_some_and(|p| limit < p) {
        out.push_str(&format!(
            "  runs in progress are not stopped (lowering only holds new starts back): {running} running now\n"
        ));
    } else {
        out.push_str(&format!(
            "  {running} running now; every replica applies it from its next claim (no restart)\n"
        ));
    }
    if waiting > 0 {
        out.push_str(&format!(
            "  {} waiting for a place (the longest for {}); each starts, oldest due first, as a place frees\n",
            text::plural(waiting, "key"),
            now.and_then(FleetLimit::longest_wait)
                .map_or_else(|| "-".to_owned(), |d| text::span(d.as_secs_f64()))
        ));
    }
    out.push_str(&format!(
        "  `leasehold limit list` shows it; `leasehold limit clear {}` lifts it\n",
        text::shell_word(job)
    ));
    out
}

/// The limit of `job` as `Controls::limits` reads it (`None`: cleared
/// meanwhile).
async fn read_one(db: &Db, store: &LeaseStore, job: &str) -> Result<Option<FleetLimit>, Failure> {
    Ok(store
        .controls()
        .limits()
        .await
        .map_err(|e| db.failure(e))?
        .into_iter()
        .find(|l| l.job == job))
}

/// `limit clear --json`.
#[derive(Serialize)]
struct ClearJson<'a> {
    job: &'a str,
    /// `cleared` or `not-limited` (nothing changed).
    outcome: &'static str,
}

async fn clear(db: &Db, args: &ClearArgs) -> Result<(), Failure> {
    check_name("job name", &args.job)?;
    let operator = ops::operator_by(db, args.by.clone().unwrap_or_else(default_by))?;
    let cleared = operator.clear_limit(&args.job).await.map_err(|e| db.failure(e))?;
    if args.json {
        out::json(&ClearJson {
            job: &args.job,
            outcome: if cleared { "cleared" } else { "not-limited" },
        })?;
    }
    let job = text::cell(&format!("{:?}", args.job));
    if !cleared {
        return Err(Failure::not_found(format!(
            "limit clear {job}: no fleet-wide limit on {job} in {} (see `leasehold limit list`); nothing to clear",
            db.name
        )));
    }
    if !args.json {
        out::line(format_args!(
            "{}: no fleet-wide limit any more; its keys start as freely as any other's from each replica's next \
             claim",
            text::cell(&args.job)
        ))?;
    }
    Ok(())
}

/// `limit list --json`.
#[derive(Serialize)]
struct ListJson<'a> {
    server_now: chrono::DateTime<chrono::Utc>,
    limits: Vec<LimitJson<'a>>,
}

async fn list(db: &Db, args: &ListArgs) -> Result<(), Failure> {
    db.require_schema().await?;
    let store = LeaseStore::new(db.pool.clone());
    let limits = store.controls().limits().await.map_err(|e| db.failure(e))?;
    let server_now = match limits.first() {
        Some(l) => l.server_now,
        None => db.server_now().await?,
    };
    if args.json {
        out::json(&ListJson {
            server_now,
            limits: limits.iter().map(LimitJson::from).collect(),
        })?;
        return Ok(());
    }
    if limits.is_empty() {
        return out::line("no fleet-wide limit in force (`leasehold limit set JOB N` sets one)");
    }
    out::print(format_args!(
        "{} in force (at most N runs of a job at once across the fleet):\n{}{}",
        text::plural(limits.len() as u64, "fleet-wide limit"),
        render_limits(&limits),
        limits_note(&limits)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_whole_numbers_from_one_to_the_largest() {
        assert_eq!(parse_limit("4").ok(), Some(4));
        assert_eq!(parse_limit("10000").ok(), Some(10_000));
        let said = |v: &str| parse_limit(v).err().map(|f| f.message).unwrap_or_default();
        assert!(said("0").starts_with("invalid limit 0: "), "{}", said("0"));
        assert!(said("0").contains("leasehold limit clear"), "{}", said("0"));
        assert!(said("-1").starts_with("invalid limit -1: below 1"), "{}", said("-1"));
        assert!(said("10001").starts_with("invalid limit 10001: more than 10000"));
        assert!(said("99999999999999999999999999999999999999999").contains("too large"));
        assert!(said("abc").starts_with("invalid limit \"abc\": not a whole number"));
        assert!(said("2.5").starts_with("invalid limit \"2.5\": not a whole number"));
        assert!(said("").starts_with("invalid limit \"\": not a whole number"));
        assert!(said("-").contains("not a whole number"), "{}", said("-"));
        // A hidden character is shown escaped, never as is.
        assert_eq!(
            said("4\u{202e}"),
            "invalid limit \"4\\u{202e}\": not a whole number; give 1 to 10000 runs at once"
        );
    }
}
