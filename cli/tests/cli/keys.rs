//! `leasehold add|update|remove KIND KEY`: the keys of job kinds, stored
//! for the whole fleet, recorded in the key's history, shown by `status`.

use leasehold::store::LeaseStore;

use super::{assert_exit, leasehold, migrated_db, stderr, stdout, url};

/// A key is added (its arguments and schedule stored), added again
/// (refused, exit 3), updated (version 2), shown by `status` under a kind
/// no live replica registers, removed, removed again (exit 4); each action
/// is in the key's history with who took it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_update_and_remove_a_key_of_a_kind() {
    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());

    let add = [
        "add",
        "invoice",
        "invoice:acme",
        "--args",
        r#"{"tenant": 7}"#,
        "--cron",
        "0 3 * * *",
        "--tz",
        "Europe/Paris",
    ];
    let out = leasehold(Some(&url), &add).await;
    assert_exit(&out, 0);
    assert_eq!(
        stdout(&out),
        "add key \"invoice:acme\": kind invoice, args {\"tenant\":7}: 1 of 1 keys added (an existing key is kept)\n"
    );
    let row = store.keys().get("invoice:acme").await.unwrap().unwrap();
    assert_eq!(
        (
            row.kind.as_str(),
            row.args.as_str(),
            row.schedule.as_str(),
            row.catch_up.as_str(),
            row.version
        ),
        (
            "invoice",
            r#"{"tenant": 7}"#,
            "cron 0 3 * * * in Europe/Paris",
            "once",
            1
        )
    );
    let out = leasehold(Some(&url), &add).await;
    assert_exit(&out, 3);
    assert_eq!(
        stderr(&out),
        "leasehold: add key \"invoice:acme\": kind invoice, args {\"tenant\":7}: 0 of 1 keys added (an existing \
         key is kept); it keeps its arguments and schedule (change them with `leasehold update`)\n"
    );

    let update = [
        "update",
        "invoice",
        "invoice:acme",
        "--args",
        r#"{"tenant": 8}"#,
        "--every",
        "5m",
        "--catch-up",
        "skip",
    ];
    let out = leasehold(Some(&url), &update).await;
    assert_exit(&out, 0);
    assert_eq!(
        stdout(&out),
        "update key \"invoice:acme\": updated to version 2: args {\"tenant\":8}\n"
    );
    let row = store.keys().get("invoice:acme").await.unwrap().unwrap();
    assert_eq!(
        (row.args.as_str(), row.schedule.as_str(), row.catch_up.as_str()),
        (r#"{"tenant": 8}"#, "every 5m", "skip")
    );

    let out = leasehold(Some(&url), &["status"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(
        text.contains("UNKNOWN: no live replica") && text.contains("1 key of a kind no live replica"),
        "{text}"
    );

    let out = leasehold(Some(&url), &["remove", "invoice", "invoice:acme"]).await;
    assert_exit(&out, 0);
    assert_eq!(
        stdout(&out),
        "remove key \"invoice:acme\": removed: every replica stops it\n"
    );
    assert!(store.keys().get("invoice:acme").await.unwrap().is_none());
    let out = leasehold(Some(&url), &["remove", "invoice", "invoice:acme"]).await;
    assert_exit(&out, 4);
    assert!(
        stderr(&out).starts_with("leasehold: remove key \"invoice:acme\": not found: no key of kind invoice in "),
        "{}",
        stderr(&out)
    );

    let actions: Vec<String> = store
        .records()
        .actions("invoice:acme", 10)
        .await
        .unwrap()
        .into_iter()
        .map(|a| format!("{} {}", a.action, a.outcome.unwrap_or_default()))
        .collect();
    assert_eq!(actions.len(), 5, "{actions:?}");
    assert!(
        actions.iter().any(|a| a.starts_with("update updated to version 2")),
        "{actions:?}"
    );
    assert!(actions.iter().any(|a| a.starts_with("remove removed")), "{actions:?}");
}

/// Bad input is a usage error (exit 2) naming the value, before connecting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_or_schedules_exit_2() {
    let db = migrated_db().await;
    let url = url(&db);
    for (args, says) in [
        (vec!["add", "k", "x", "--args", "{nope", "--every", "5m"], "not JSON"),
        (vec!["add", "k", "x", "--args", "1"], "--every DURATION"),
        (
            vec!["add", "k", "x", "--args", "1", "--every", "5 parsecs"],
            "5 parsecs",
        ),
        (
            vec![
                "add",
                "k",
                "x",
                "--args",
                "1",
                "--cron",
                "0 3 * * *",
                "--tz",
                "Europe/Pariss",
            ],
            "Europe/Paris",
        ),
        (
            vec!["add", "k", "x", "--args", "1", "--manual", "--catch-up", "all(0)"],
            "all(0)",
        ),
        (
            vec!["add", "k", "x", "--args", "1", "--manual", "--timeout", "50ms"],
            "run timeout 50ms: must be from 100ms to 168h",
        ),
        (
            vec!["add", "k", "x", "--args", "1", "--manual", "--timeout", "169h"],
            "run timeout 169h: must be from 100ms to 168h",
        ),
        (
            vec!["update", "k", "x", "--args", "1", "--manual", "--timeout", "soon"],
            "--timeout soon",
        ),
    ] {
        let out = leasehold(Some(&url), &args).await;
        assert_exit(&out, 2);
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
}

/// `--timeout` gives a key its own time limit per run; an update without
/// it goes back to its kind's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_gets_its_own_time_limit_and_an_update_without_one_drops_it() {
    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    let add = [
        "add",
        "report",
        "report:acme",
        "--args",
        "7",
        "--every",
        "1h",
        "--timeout",
        "15m",
    ];
    assert_exit(&leasehold(Some(&url), &add).await, 0);
    let row = store.keys().get("report:acme").await.unwrap().unwrap();
    assert_eq!(row.timeout, Some(std::time::Duration::from_secs(900)));
    let update = ["update", "report", "report:acme", "--args", "7", "--every", "1h"];
    assert_exit(&leasehold(Some(&url), &update).await, 0);
    let row = store.keys().get("report:acme").await.unwrap().unwrap();
    assert_eq!((row.timeout, row.version), (None, 2));
}
