//! Errors every command shares: an unreachable database, usage errors (exit
//! 2), a missing schema.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_is_a_clear_error() {
    // Port 1 on loopback: nothing listens there.
    let url = "postgres://nobody:secret-password@127.0.0.1:1/app";
    for args in [
        &["status"][..],
        &["check"],
        &["migrate"],
        &["revoke", "k"],
        &["forget", "k"],
        &["history", "k"],
        &["pause", "k"],
        &["resume", "--job", "j"],
        &["trigger", "k"],
        &["limit", "set", "j", "4"],
        &["limit", "clear", "j"],
        &["limit", "list"],
    ] {
        let mut all = args.to_vec();
        all.extend(["--connect-timeout", "5s"]);
        let out = leasehold(Some(url), &all).await;
        assert_exit(&out, 1);
        let err = stderr(&out);
        assert!(
            err.contains("cannot connect to PostgreSQL at nobody@127.0.0.1:1/app"),
            "{err}"
        );
        assert!(!err.contains("secret-password"), "the password is never printed: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_errors_exit_2() {
    let out = leasehold(None, &["status"]).await;
    assert_exit(&out, 2);
    assert!(stderr(&out).contains("DATABASE_URL"), "{}", stderr(&out));
    let out = leasehold(Some("mysql://x@y/z"), &["status"]).await;
    assert_exit(&out, 2);
    assert!(stderr(&out).contains("invalid database URL"), "{}", stderr(&out));
    let out = leasehold(Some("postgres://u@127.0.0.1:1/d"), &["frobnicate"]).await;
    assert_exit(&out, 2);
    let out = leasehold(Some("postgres://u@127.0.0.1:1/d"), &["revoke"]).await;
    assert_exit(&out, 2);
    let out = leasehold(Some("postgres://u@127.0.0.1:1/d"), &["revoke", ""]).await;
    assert_exit(&out, 2);
    let out = leasehold(Some("postgres://u@127.0.0.1:1/d"), &["forget"]).await;
    assert_exit(&out, 2);
    let long = "k".repeat(leasehold::store::MAX_KEY_BYTES + 1);
    let out = leasehold(Some("postgres://u@127.0.0.1:1/d"), &["forget", &long, "--json"]).await;
    assert_exit(&out, 2);
    assert!(stderr(&out).contains("invalid lease key"), "{}", stderr(&out));
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_schema_names_leasehold_migrate_which_creates_it() {
    let db = leasehold_testkit::test_db().await;
    let url = url(&db);
    for args in [
        &["status"][..],
        &["revoke", "k", "--force"],
        &["forget", "k"],
        &["history", "k"],
        &["pause", "k"],
        &["resume", "k"],
        &["trigger", "k"],
        &["limit", "set", "j", "4"],
        &["limit", "clear", "j"],
        &["limit", "list"],
    ] {
        let out = leasehold(Some(&url), args).await;
        assert_exit(&out, 1);
        assert!(stderr(&out).contains("run `leasehold migrate`"), "{}", stderr(&out));
    }
    let out = leasehold(Some(&url), &["check"]).await;
    assert_exit(&out, 1);
    assert!(stdout(&out).contains("leasehold migrate"), "{}", stdout(&out));

    let out = leasehold(Some(&url), &["migrate"]).await;
    assert_exit(&out, 0);
    let version = leasehold::schema::SCHEMA_VERSION;
    assert!(
        stdout(&out).contains(&format!("from nothing to version {version}")),
        "{}",
        stdout(&out)
    );
    leasehold::schema::check_schema(&db.pool)
        .await
        .expect("schema exists now");
    let out = leasehold(Some(&url), &["migrate"]).await;
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains(&format!("already at version {version}")),
        "{}",
        stdout(&out)
    );
    let out = leasehold(Some(&url), &["status"]).await;
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("0 leases"), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_usage_errors_exit_2() {
    let url = Some("postgres://u@127.0.0.1:1/d");
    for (args, says) in [
        (&["history", "k", "--limit", "0"][..], "0 is not in 1..=10000"),
        (&["history", "k", "--limit", "10001"], "10001 is not in 1..=10000"),
        (&["history", "k", "--limit", "-3"], "-3"),
        (&["pause"], "required"),
        (&["pause", "k", "--job", "j"], "cannot be used with"),
        (&["resume"], "required"),
        (&["resume", "k", "--job", "j"], "cannot be used with"),
        (&["pause", "k", "--by", ""], "invalid --by"),
        (&["pause", "--job", ""], "invalid job name"),
        (&["trigger"], "required"),
        (&["trigger", ""], "invalid lease key"),
    ] {
        let out = leasehold(url, args).await;
        assert_exit(&out, 2);
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
}
