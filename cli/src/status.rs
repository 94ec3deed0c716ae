//! `leasehold status`: every lease as the server sees it now.
//!
//! A lease is **held** while its `expires_at` is after the server clock, and
//! **free** otherwise. A released lease keeps its last holder and expires at
//! the moment of release, so from the row alone "released" and "expired"
//! look the same: both are free, shown with how long ago they ended.

use chrono::{DateTime, Datelike, Utc};
use serde::Serialize;

use crate::db::Db;
use crate::failure::Failure;
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

/// One lease row, read with the server clock of the same statement.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct Row {
    pub(crate) key: String,
    pub(crate) holder: String,
    pub(crate) fence: i64,
    pub(crate) acquired_at: DateTime<Utc>,
    pub(crate) expires_at: DateTime<Utc>,
    pub(crate) next_due_at: Option<DateTime<Utc>>,
    pub(crate) server_now: DateTime<Utc>,
}

impl Row {
    pub(crate) fn held(&self) -> bool {
        self.expires_at > self.server_now
    }

    /// A key registered by a runtime but never claimed (the library's rule:
    /// its holder and fence are placeholders).
    pub(crate) fn never_run(&self) -> bool {
        !self.held() && leasehold::never_claimed(self.acquired_at, self.expires_at)
    }

    pub(crate) fn state(&self) -> &'static str {
        if self.held() {
            "held"
        } else if self.never_run() {
            "never-run"
        } else {
            "free"
        }
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

    /// `now`, `in 4m 10s`, `3m 2s ago` (due since then), or `never` for a
    /// job that only runs when triggered.
    pub(crate) fn due_text(&self) -> String {
        match self.next_due_at {
            None => "now".to_owned(),
            Some(due) if due.year() >= 9999 => "never".to_owned(),
            Some(due) => text::relative(text::secs(due - self.server_now)),
        }
    }
}

/// Columns shared by `status` and `release`. `server_now` is one value for
/// the whole statement (an uncorrelated subquery runs once), so every row
/// is judged against the same instant.
pub(crate) const ROW_COLUMNS: &str =
    "l.key, l.holder, l.fence, l.acquired_at, l.expires_at, l.next_due_at, (SELECT clock_timestamp()) AS server_now";

#[derive(Serialize)]
struct StatusJson<'a> {
    server_now: DateTime<Utc>,
    leases: Vec<LeaseJson<'a>>,
}

/// A lease as the library reports it (`LeaseStore::forget`'s `Held`).
impl From<leasehold::LeaseInfo> for Row {
    fn from(info: leasehold::LeaseInfo) -> Row {
        Row {
            key: info.key,
            holder: info.holder,
            fence: info.fence,
            acquired_at: info.acquired_at,
            expires_at: info.expires_at,
            next_due_at: info.next_due_at,
            server_now: info.server_now,
        }
    }
}

/// One lease in `--json` output (`status`, and `forget` of a held lease).
#[derive(Serialize)]
pub(crate) struct LeaseJson<'a> {
    key: &'a str,
    /// The holder, or the last holder of a free lease.
    holder: &'a str,
    fence: i64,
    /// `held`, `free`, or `never-run` (registered, never claimed: holder
    /// and fence are placeholders).
    state: &'static str,
    acquired_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    /// Negative once expired (or released).
    expires_in_seconds: f64,
    /// `null`: due now (never scheduled). Year 9999: only when triggered.
    next_due_at: Option<DateTime<Utc>>,
    /// Negative when already due; `null` with `next_due_at`.
    due_in_seconds: Option<f64>,
}

impl Row {
    pub(crate) fn json(&self) -> LeaseJson<'_> {
        LeaseJson {
            key: &self.key,
            holder: &self.holder,
            fence: self.fence,
            state: self.state(),
            acquired_at: self.acquired_at,
            expires_at: self.expires_at,
            expires_in_seconds: self.expires_in(),
            next_due_at: self.next_due_at,
            due_in_seconds: self.next_due_at.map(|due| text::secs(due - self.server_now)),
        }
    }
}

pub(crate) async fn run(db: &Db, args: &Args) -> Result<(), Failure> {
    db.require_schema().await?;
    let sql = format!(
        "SELECT {ROW_COLUMNS} FROM leasehold_lease l WHERE $1::text IS NULL OR starts_with(l.key, $1) ORDER BY l.key"
    );
    let rows: Vec<Row> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(args.prefix.as_deref())
        .fetch_all(&db.pool)
        .await?;
    let server_now = match rows.first() {
        Some(row) => row.server_now,
        None => {
            sqlx::query_scalar("SELECT clock_timestamp()")
                .fetch_one(&db.pool)
                .await?
        }
    };
    if args.json {
        let doc = StatusJson {
            server_now,
            leases: rows.iter().map(Row::json).collect(),
        };
        let json = serde_json::to_string_pretty(&doc).map_err(|e| Failure::error(format!("writing JSON: {e}")))?;
        println!("{json}");
        return Ok(());
    }
    print!("{}", render(&rows, server_now, args.prefix.as_deref()));
    Ok(())
}

fn render(rows: &[Row], server_now: DateTime<Utc>, prefix: Option<&str>) -> String {
    let held = rows.iter().filter(|r| r.held()).count();
    let scope = match prefix {
        Some(p) => format!(" with prefix {}", text::cell(&format!("{p:?}"))),
        None => String::new(),
    };
    let mut out = format!(
        "server time {}: {} lease{}{scope} ({held} held, {} free)\n",
        text::time(server_now),
        rows.len(),
        if rows.len() == 1 { "" } else { "s" },
        rows.len() - held,
    );
    if rows.is_empty() {
        return out;
    }
    out.push('\n');
    let header = [
        ("KEY", Align::Left),
        ("STATE", Align::Left),
        ("HOLDER", Align::Left),
        ("FENCE", Align::Right),
        ("ACQUIRED", Align::Left),
        ("EXPIRES", Align::Left),
        ("NEXT DUE", Align::Left),
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            if r.never_run() {
                let none = || "-".to_owned();
                vec![
                    text::cell(&r.key),
                    r.state().to_owned(),
                    none(),
                    none(),
                    none(),
                    none(),
                    r.due_text(),
                ]
            } else {
                vec![
                    text::cell(&r.key),
                    r.state().to_owned(),
                    text::cell(&r.holder),
                    r.fence.to_string(),
                    text::time(r.acquired_at),
                    r.expiry_text(),
                    r.due_text(),
                ]
            }
        })
        .collect();
    out.push_str(&text::table(&header, &cells));
    out
}
