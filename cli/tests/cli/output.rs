//! What the CLI writes besides its answer: standard output closed by its
//! reader, and the library's log lines on standard error.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};

use super::*;

/// Runs the binary with its standard output read by `reader` (which gets
/// the pipe and drops it when done), and returns the exit and stderr.
async fn with_reader<F, Fut>(url: &str, args: &[&str], reader: F) -> Output
where
    F: FnOnce(tokio::process::ChildStdout) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut cmd = command(Some(url), args);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("the CLI binary runs");
    let stdout = child.stdout.take().expect("a piped stdout");
    reader(stdout).await;
    tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the CLI finished within 60s")
        .expect("the CLI's exit")
}

#[track_caller]
fn assert_quiet_success(out: &Output, what: &str) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: a closed standard output ends it with success\n--- stderr\n{}",
        stderr(out)
    );
    assert!(
        stderr(out).is_empty(),
        "{what}: nothing on stderr, got\n{}",
        stderr(out)
    );
}

/// `leasehold status | head -1` on a fleet whose table is far larger than
/// a pipe's buffer: the reader takes one line and goes away, the CLI's next
/// write fails with a broken pipe, and it stops quietly with success (as
/// `ls | head -1` does), not with a panic and exit 101.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_piped_into_head_stops_quietly_with_success() {
    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    // 1,500 rows of over 150 bytes: several times a 64 KiB pipe buffer.
    for n in 0..1500 {
        acquired(
            store
                .claim(&format!("tenant-{n:05}:{}", "x".repeat(40)), "web-1", LONG)
                .await
                .unwrap(),
        );
    }
    for args in [&["status"][..], &["status", "--json"]] {
        let first = Arc::new(std::sync::Mutex::new(String::new()));
        let seen = first.clone();
        let out = with_reader(&url, args, |stdout| async move {
            let mut lines = BufReader::new(stdout).lines();
            let line = lines.next_line().await.expect("reading stdout").unwrap_or_default();
            *seen.lock().unwrap() = line;
            // `lines` (the pipe's read end) is dropped here, like `head -1`
            // exiting.
        })
        .await;
        let first = first.lock().unwrap().clone();
        assert!(
            first.starts_with("server time ") || first == "{",
            "{args:?}: the first line arrived: {first:?}"
        );
        assert_quiet_success(&out, &format!("{args:?}"));
    }
}

/// Every command that prints stops quietly with success when its reader
/// is gone before it writes (`leasehold check | true`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_stops_quietly_when_its_reader_is_gone() {
    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    released_row(&store, "k", "web-1").await;
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["history", "k"],
        &["history", "k", "--json"],
        &["trigger", "k"],
        &["trigger", "k", "--json"],
        &["pause", "k"],
        &["resume", "k"],
        &["pause", "--job", "j", "--json"],
        &["resume", "--job", "j", "--json"],
        &["revoke", "k"],
        &["forget", "k"],
        &["add", "kind", "key", "--args", "{}", "--every", "1h"],
        &["update", "kind", "key", "--args", "{}", "--every", "2h"],
        &["remove", "kind", "key"],
        &["migrate"],
        &["check"],
    ] {
        let out = with_reader(&url, args, |stdout| async move { drop(stdout) }).await;
        assert_quiet_success(&out, &format!("{args:?}"));
    }
    // Each of them ran: the forget deleted the key's row, `add` made a key.
    assert!(store.get("k").await.unwrap().is_none(), "forget ran to its end");
}

/// The library's warnings reach standard error by default, in a log line
/// apart from the command's answer on standard output; `RUST_LOG` selects
/// more (or less).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_log_lines_go_to_stderr_filtered_by_rust_log() {
    let db = leasehold_testkit::test_db().await;
    let url = url(&db);

    // `migrate` logs each migration it applies at info: not shown by default…
    let out = leasehold(Some(&url), &["migrate"]).await;
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("from nothing to version"), "{}", stdout(&out));
    assert!(stderr(&out).is_empty(), "quiet by default:\n{}", stderr(&out));
    sqlx::raw_sql("DROP TABLE leasehold_schema_version CASCADE")
        .execute(&db.pool)
        .await
        .unwrap();
    // … and shown with RUST_LOG=leasehold=info, on stderr only.
    let out = leasehold_env(Some(&url), &["migrate"], &[("RUST_LOG", "leasehold=info")]).await;
    assert_exit(&out, 0);
    assert!(
        stderr(&out).contains("applying leasehold migration"),
        "{}",
        stderr(&out)
    );
    assert!(!stdout(&out).contains("applying"), "{}", stdout(&out));

    // An action whose record cannot be written fails with it (they are one
    // statement), and the library warns that its error could not be
    // recorded either: the warning shown without RUST_LOG, on a log line
    // apart from the command's failure, and hidden with RUST_LOG=off.
    let store = LeaseStore::new(db.pool.clone());
    released_row(&store, "k", "web-1").await;
    let due_before = store.get("k").await.unwrap().unwrap().next_due_at;
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_record() RETURNS trigger LANGUAGE plpgsql AS \
         $$BEGIN RAISE EXCEPTION 'record refused by the test'; END$$;
         CREATE TRIGGER refuse_record BEFORE INSERT ON leasehold_action
             FOR EACH ROW EXECUTE FUNCTION refuse_record();",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let out = leasehold(Some(&url), &["trigger", "k"]).await;
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.lines()
            .any(|l| l.contains("WARN") && l.contains("the action's outcome was not recorded")),
        "{err}"
    );
    assert!(
        err.lines()
            .any(|l| l.starts_with("leasehold: ") && l.contains("record refused by the test")),
        "{err}"
    );
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    assert_eq!(
        store.get("k").await.unwrap().unwrap().next_due_at,
        due_before,
        "the trigger did not take effect without its record"
    );
    let out = leasehold_env(Some(&url), &["trigger", "k"], &[("RUST_LOG", "off")]).await;
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(!err.contains("WARN"), "{err}");
    assert!(err.contains("record refused by the test"), "{err}");

    // A RUST_LOG that is no filter is named, and the default used.
    let out = leasehold_env(Some(&url), &["trigger", "k"], &[("RUST_LOG", "leasehold=loud")]).await;
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("RUST_LOG=leasehold=loud is not a log filter"), "{err}");
    assert!(err.contains("the action's outcome was not recorded"), "{err}");
}
