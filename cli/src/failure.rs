//! Failures and the exit codes they map to.

use std::process::ExitCode;

use crate::text;

/// How the process ends when a command fails. The values are documented
/// in the crate docs and `cli/README.md`; scripts rely on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    /// Standard output was closed by its reader (`leasehold status | head
    /// -1`): not a failure, the command stops quietly with success.
    Closed = 0,
    /// Anything that went wrong: database, schema, a failed check.
    Error = 1,
    /// The command line is wrong (clap uses 2 for its own usage errors too).
    Usage = 2,
    /// The command would break a live tenure and `--force` was not given.
    Refused = 3,
    /// The lease key has no row.
    NotFound = 4,
}

/// A failed command: an exit code and a message for standard error.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: Code,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn error(message: impl Into<String>) -> Self {
        Failure {
            code: Code::Error,
            message: message.into(),
        }
    }

    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Failure {
            code: Code::Usage,
            message: message.into(),
        }
    }

    pub(crate) fn refused(message: impl Into<String>) -> Self {
        Failure {
            code: Code::Refused,
            message: message.into(),
        }
    }

    /// Standard output was closed by its reader: stop, quietly, exit 0.
    pub(crate) fn closed() -> Self {
        Failure {
            code: Code::Closed,
            message: String::new(),
        }
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Failure {
            code: Code::NotFound,
            message: message.into(),
        }
    }

    /// Prints the message (nothing when standard output was closed) and
    /// returns the exit code. A closed standard error is ignored: the exit
    /// code still tells.
    pub(crate) fn exit(self) -> ExitCode {
        if self.code != Code::Closed {
            use std::io::Write;
            let _ = writeln!(std::io::stderr().lock(), "leasehold: {}", self.message);
        }
        ExitCode::from(self.code as u8)
    }
}

/// A database error for people: the server's own message and SQLSTATE
/// rather than sqlx's wrapping (which adds the server's C source line).
pub(crate) fn describe(e: &sqlx::Error) -> String {
    match e.as_database_error() {
        Some(db) => match db.code() {
            Some(code) => format!("the server said: {} (SQLSTATE {code})", db.message()),
            None => format!("the server said: {}", db.message()),
        },
        None => e.to_string(),
    }
}

impl From<sqlx::Error> for Failure {
    fn from(e: sqlx::Error) -> Self {
        Failure::error(format!("database error: {}", describe(&e)))
    }
}

/// A broken rule as a usage failure, in the library's words, the value
/// shown safely on a terminal.
fn broken(e: leasehold_rules::RuleError) -> Failure {
    Failure::usage(refusal(e.what, &e.value, &e.problem))
}

/// The words of a refused value: what it is, the value escaped for a
/// terminal, and the rule's problem.
fn refusal(what: &str, value: &str, problem: &str) -> String {
    format!("invalid {what} {}: {problem}", text::cell(value))
}

/// A lease key, job name or fenced resource, checked before anything is
/// sent by the rule the library applies (`leasehold_rules::identifier`).
pub(crate) fn check_name(what: &'static str, value: &str) -> Result<(), Failure> {
    leasehold_rules::identifier(what, value).map_err(broken)
}

/// Who acts (`--by`), checked by the rule the library's audit applies
/// (`leasehold_rules::actor`), the error naming `option`.
pub(crate) fn check_actor(option: &'static str, value: &str) -> Result<(), Failure> {
    leasehold_rules::actor(value).map_err(|e| broken(leasehold_rules::RuleError { what: option, ..e }))
}

/// Parses a lease key argument into the library's [`leasehold::Key`]: the
/// key is checked here, once, by the library's rule, and trusted from then
/// on (the library does not check a `Key` again). A refusal is clap's usage
/// error (exit 2) in the library's words, the value shown escaped — clap's
/// own "invalid value" message would print it raw.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyArg;

impl clap::builder::TypedValueParser for KeyArg {
    type Value = leasehold::Key;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<leasehold::Key, clap::Error> {
        use clap::error::ErrorKind;
        let refuse = |kind, message: String| clap::Error::raw(kind, format!("{message}\n")).with_cmd(cmd);
        let Some(text) = value.to_str() else {
            return Err(refuse(
                ErrorKind::InvalidUtf8,
                "invalid lease key: it is not UTF-8".to_owned(),
            ));
        };
        leasehold::Key::new(text).map_err(|e| match e {
            leasehold::Error::InvalidInput { what, value, problem } => {
                refuse(ErrorKind::ValueValidation, refusal(what, &value, &problem))
            }
            other => refuse(ErrorKind::ValueValidation, text::cell(&other.to_string())),
        })
    }
}
