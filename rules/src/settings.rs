//! Every job setting, once: its attribute name, what its value is, its
//! single-value check, where it may be given, the `JobSettings` setter it
//! sets, its default and its doc line.
//!
//! [`SETTINGS`] drives the derives (`#[job(...)]` and `#[kind(...)]`:
//! which names exist, the guesses for unknown ones, how each value is read
//! and checked, which setter the expansion calls) and the docs: the
//! attribute table of the README and of `#[derive(FencedJob)]`
//! ([`attribute_table`]) and the setter table of `JobSettings`
//! ([`setter_table`]) are rendered from it, and a test fails when a copy
//! drifts. Rules *between* settings (heartbeat against lease, margin,
//! retry against its cap) are [`Timing`](crate::Timing)'s.

use std::time::Duration;

use crate::RuleError;

/// What a setting's value is: how the derive reads and checks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    /// A job or kind name: [`check_identifier`](crate::check_identifier).
    Name,
    /// A lease key template (`"reconcile:{tenant}"`).
    Key,
    /// A duration in the attribute syntax ([`parse_duration`](crate::parse_duration)),
    /// then its own bound ([`Setting::bound`]).
    Duration,
    /// A cron expression ([`cron`](crate::cron), [`cron_fires`](crate::cron_fires)).
    Cron,
    /// An IANA time zone ([`zone`](crate::zone)).
    Zone,
    /// A catch-up policy ([`parse_catch_up`](crate::parse_catch_up)).
    CatchUp,
    /// A Rust type, written bare (`args = Tenant`), not a string.
    Type,
}

/// Which derive takes a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applies {
    /// `#[job(...)]` and `#[kind(...)]`.
    Both,
    /// `#[job(...)]` only; the text says why a kind refuses it and what to
    /// do instead.
    JobOnly(&'static str),
    /// `#[kind(...)]` only, and required there.
    KindOnly,
}

/// The `JobSettings` setter a setting reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setter {
    /// None: the setting is a method of the job itself (`name`, `key`) or a
    /// kind's associated type (`args`).
    Trait,
    /// `schedule` (or `new`): the setting is part of the schedule.
    Schedule,
    /// `catch_up`.
    CatchUp,
    /// A setter taking one `Duration`, by name.
    Duration(&'static str),
    /// `retry(initial, max)`: the first argument.
    RetryInitial,
    /// `retry(initial, max)`: the second argument.
    RetryMax,
}

impl Setter {
    /// The method name on `JobSettings`, if any.
    pub const fn method(self) -> Option<&'static str> {
        match self {
            Setter::Trait => None,
            Setter::Schedule => Some("schedule"),
            Setter::CatchUp => Some("catch_up"),
            Setter::Duration(name) => Some(name),
            Setter::RetryInitial | Setter::RetryMax => Some("retry"),
        }
    }
}

/// One setting.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// The attribute name, as in `#[job(lease = "60s")]`.
    pub name: &'static str,
    /// What its value is.
    pub value: Value,
    /// A value to show in messages and docs, as written (`"60s"`).
    pub example: &'static str,
    /// Names people reach for that mean this setting.
    pub synonyms: &'static [&'static str],
    /// The check of the value on its own, after parsing (durations only).
    pub bound: Option<fn(Duration) -> Result<Duration, RuleError>>,
    /// Which derive takes it.
    pub applies: Applies,
    /// The `JobSettings` setter it sets.
    pub setter: Setter,
    /// The default, as the docs table shows it.
    pub default: &'static str,
    /// The docs table's "meaning and compile-time checks".
    pub doc: &'static str,
}

/// Why a kind refuses a schedule setting.
const PER_KEY: &str = "a kind's keys each have their own schedule and catch-up, given when the key is added \
                       (`NewKey::new(kind, key, &args, \"every 5m\".parse()?)`, `leasehold add ... --every 5m`)";

fn lease_bound(lease: Duration) -> Result<Duration, RuleError> {
    crate::lease("lease duration", lease)
}

fn timeout_bound(limit: Duration) -> Result<Duration, RuleError> {
    crate::run_timeout("run timeout", limit)
}

/// Every setting, in the order the docs list them.
pub const SETTINGS: &[Setting] = &[
    Setting {
        name: "name",
        value: Value::Name,
        example: "\"reconcile\"",
        synonyms: &["label"],
        bound: None,
        applies: Applies::Both,
        setter: Setter::Trait,
        default: "struct name in snake_case",
        doc: "label in metrics and logs (a kind's name is stored with its keys); not empty, at most 255 bytes, no NUL",
    },
    Setting {
        name: "key",
        value: Value::Key,
        example: "\"reconcile:{tenant}\"",
        synonyms: &["lease_key"],
        bound: None,
        applies: Applies::JobOnly(
            "a kind's keys are data, each added with its own key (`NewKey::new(kind, key, &args, schedule)`)",
        ),
        setter: Setter::Trait,
        default: "the name",
        doc: "lease key; `{field}` is that named field of `self` (`Display`), `{{`/`}}` are braces; unknown fields, \
              positional or formatted placeholders, an empty key and more than 255 literal bytes are errors",
    },
    Setting {
        name: "args",
        value: Value::Type,
        example: "Tenant",
        synonyms: &["arguments", "params"],
        bound: None,
        applies: Applies::KindOnly,
        setter: Setter::Trait,
        default: "— (required on a kind)",
        doc: "a kind's `Args`: the type each key's arguments are stored as (JSON) and its `run` takes; a type, not a \
              string; must be `Serialize + DeserializeOwned + Send + 'static`",
    },
    Setting {
        name: "every",
        value: Value::Duration,
        example: "\"5m\"",
        synonyms: &["interval", "period"],
        bound: Some(crate::period),
        applies: Applies::JobOnly(PER_KEY),
        setter: Setter::Schedule,
        default: "manual",
        doc: "run once per period, in slots aligned on the epoch; at least `100ms`; not with `cron`; with neither, \
              the job runs only when triggered",
    },
    Setting {
        name: "cron",
        value: Value::Cron,
        example: "\"0 3 * * *\"",
        synonyms: &[],
        bound: None,
        applies: Applies::JobOnly(PER_KEY),
        setter: Setter::Schedule,
        default: "manual",
        doc: "run when the expression matches (UTC unless `tz`; 5 fields, or 6 with seconds first); parsed by \
              `croner` as the library does, and must fire at least once; not with `every`",
    },
    Setting {
        name: "tz",
        value: Value::Zone,
        example: "\"Europe/Paris\"",
        synonyms: &["timezone", "time_zone", "zone", "tzid"],
        bound: None,
        applies: Applies::JobOnly(PER_KEY),
        setter: Setter::Schedule,
        default: "UTC",
        doc: "the IANA time zone `cron` is read in (`Schedule::cron_in`, with its daylight-saving rule); only with \
              `cron`; an unknown zone is an error, with the closest name",
    },
    Setting {
        name: "catch_up",
        value: Value::CatchUp,
        example: "\"all(24)\"",
        synonyms: &["misfire", "missed", "backfill", "catchup"],
        bound: None,
        applies: Applies::JobOnly(PER_KEY),
        setter: Setter::CatchUp,
        default: "`\"once\"`",
        doc: "slots missed while no replica ran the key: `\"once\"` (one run for the stretch), `\"skip\"` (none), \
              `\"all(N)\"` (each of the latest N, oldest first; N from 1 to 1000); a bare `\"all\"` is an error",
    },
    Setting {
        name: "lease",
        value: Value::Duration,
        example: "\"60s\"",
        synonyms: &["ttl", "lease_ttl"],
        bound: Some(lease_bound),
        applies: Applies::Both,
        setter: Setter::Duration("lease"),
        default: "`60s`",
        doc: "lease length; `10ms` to `168h` (`MIN_LEASE`..=`MAX_LEASE`)",
    },
    Setting {
        name: "heartbeat",
        value: Value::Duration,
        example: "\"20s\"",
        synonyms: &["heartbeat_interval"],
        bound: None,
        applies: Applies::Both,
        setter: Setter::Duration("heartbeat"),
        default: "lease/3",
        doc: "renewal interval; below half the lease",
    },
    Setting {
        name: "margin",
        value: Value::Duration,
        example: "\"6s\"",
        synonyms: &["deadline_margin", "deadline"],
        bound: None,
        applies: Applies::Both,
        setter: Setter::Duration("margin"),
        default: "lease/10",
        doc: "local deadline margin; heartbeat + margin below the lease, and at least lease/50 (2ρ × lease, ρ = 1 %: \
              the clock-rate error it covers)",
    },
    Setting {
        name: "grace",
        value: Value::Duration,
        example: "\"5s\"",
        synonyms: &["grace_period"],
        bound: None,
        applies: Applies::Both,
        setter: Setter::Duration("grace"),
        default: "`5s`",
        doc: "how long a cancelled run may take to return before it is dropped",
    },
    Setting {
        name: "timeout",
        value: Value::Duration,
        example: "\"15m\"",
        synonyms: &["time_limit", "max_duration", "run_timeout"],
        bound: Some(timeout_bound),
        applies: Applies::Both,
        setter: Setter::Duration("timeout"),
        default: "none",
        doc: "time limit of a run: past it the run is cancelled (reason `timeout`), dropped after its grace, and \
              the key runs again at its next slot; `100ms` to `168h` (`MIN_TIMEOUT`..=`MAX_TIMEOUT`)",
    },
    Setting {
        name: "retry",
        value: Value::Duration,
        example: "\"1s\"",
        synonyms: &["retry_initial", "backoff"],
        bound: None,
        applies: Applies::Both,
        setter: Setter::RetryInitial,
        default: "`1s`",
        doc: "first backoff after a failed run, doubling per failure",
    },
    Setting {
        name: "retry_max",
        value: Value::Duration,
        example: "\"5m\"",
        synonyms: &["max_retry", "retry_backoff_max"],
        bound: None,
        applies: Applies::Both,
        setter: Setter::RetryMax,
        default: "`5m`",
        doc: "backoff cap; at least `retry`",
    },
];

/// Names people reach for that mean more than one setting, with what to
/// write instead.
pub const ALIASES: &[(&str, &str)] = &[("schedule", "every` or `cron")];

/// The setting called `name`.
pub fn setting(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

/// The docs' attribute table (markdown), one row per setting, with a
/// column saying what `#[kind(...)]` does with it.
pub fn attribute_table() -> String {
    let mut out =
        String::from("| attribute | default | meaning and compile-time checks | on a kind |\n|---|---|---|---|\n");
    for s in SETTINGS {
        let kind = match s.applies {
            Applies::Both => "yes",
            Applies::JobOnly(_) => "no: per key",
            Applies::KindOnly => "required (kinds only)",
        };
        out.push_str(&format!(
            "| `{} = {}` | {} | {} | {kind} |\n",
            s.name, s.example, s.default, s.doc
        ));
    }
    out
}

/// The `JobSettings` docs' table: each setter, its getter, and the
/// attributes that set it.
pub fn setter_table() -> String {
    let mut out = String::from("| setter | getter | attributes |\n|---|---|---|\n");
    let mut done: Vec<&str> = Vec::new();
    for method in SETTINGS.iter().filter_map(|s| s.setter.method()) {
        if done.contains(&method) {
            continue;
        }
        done.push(method);
        let attributes: Vec<String> = SETTINGS
            .iter()
            .filter(|s| s.setter.method() == Some(method))
            .map(|s| format!("`{}`", s.name))
            .collect();
        out.push_str(&format!(
            "| [`{method}`](JobSettings::{method}) | [`get_{method}`](JobSettings::get_{method}) | {} |\n",
            attributes.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests;
