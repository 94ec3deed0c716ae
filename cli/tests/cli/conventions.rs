//! What every command shares: `--json`, one duration syntax, the libpq
//! variables, the exit codes `--help` lists, tables measured as displayed.

use unicode_width::UnicodeWidthStr;

use super::*;

/// `revoke`, `add`, `update`, `remove`, `migrate` and `check` print one
/// JSON document with `--json`, in every outcome, with the exit code and
/// the message on stderr they have without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_on_every_command_that_prints() {
    let db = leasehold_testkit::test_db().await;
    let url = url(&db);
    let version = leasehold::schema::SCHEMA_VERSION;

    let out = leasehold(Some(&url), &["migrate", "--json"]).await;
    assert_exit(&out, 0);
    let doc = json(&out);
    assert_eq!(
        (&doc["from"], &doc["to"], &doc["changed"]),
        (
            &serde_json::Value::Null,
            &serde_json::json!(version),
            &serde_json::json!(true)
        ),
        "{doc}"
    );
    assert!(doc["database"].as_str().unwrap().ends_with(&db.name), "{doc}");
    let doc = json(&leasehold(Some(&url), &["migrate", "--json"]).await);
    assert_eq!(
        (&doc["from"], &doc["changed"]),
        (&serde_json::json!(version), &serde_json::json!(false))
    );

    let out = leasehold(Some(&url), &["check", "--json"]).await;
    assert_exit(&out, 0);
    let doc = json(&out);
    assert_eq!(doc["passed"], true, "{doc}");
    let checks: Vec<(&str, &str)> = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["check"].as_str().unwrap(), c["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        checks,
        [
            ("server", "ok"),
            ("schema", "ok"),
            ("clock", "ok"),
            ("lease", "ok"),
            ("failover", "ok")
        ]
    );

    // revoke: held (exit 3), ended, not-found (exit 4).
    let store = LeaseStore::new(db.pool.clone());
    let lease = acquired(store.claim("k", "web-1", LONG).await.unwrap());
    let out = leasehold(Some(&url), &["revoke", "k", "--json"]).await;
    assert_exit(&out, 3);
    let doc = json(&out);
    assert_eq!(
        (doc["outcome"].as_str(), doc["force"].as_bool()),
        (Some("held"), Some(false)),
        "{doc}"
    );
    assert_eq!(
        (&doc["lease"]["holder"], &doc["lease"]["fence"]),
        (&serde_json::json!("web-1"), &serde_json::json!(lease.fence))
    );
    assert!(stderr(&out).contains("refused: held by web-1"), "{}", stderr(&out));
    let out = leasehold(Some(&url), &["revoke", "k", "--force", "--resource", "r", "--json"]).await;
    assert_exit(&out, 0);
    let doc = json(&out);
    assert_eq!(doc["outcome"], "ended", "{doc}");
    assert!(doc["fence"].as_i64().unwrap() > lease.fence, "{doc}");
    assert_eq!(doc["resources"], serde_json::json!(["k", "r"]));
    assert_eq!(doc["lease"]["state"], "held", "the lease as it was: {doc}");
    let out = leasehold(Some(&url), &["revoke", "nope", "--json"]).await;
    assert_exit(&out, 4);
    assert_eq!(json(&out)["outcome"], "not-found");

    // add, update, remove.
    let define = |cmd: &'static str| [cmd, "kind", "key", "--args", "{\"n\":1}", "--every", "1h", "--json"];
    let out = leasehold(Some(&url), &define("update")).await;
    assert_exit(&out, 4);
    assert_eq!(json(&out)["outcome"], "not-found");
    let out = leasehold(Some(&url), &define("add")).await;
    assert_exit(&out, 0);
    assert_eq!(
        json(&out),
        serde_json::json!({"kind": "kind", "key": "key", "outcome": "added"})
    );
    let out = leasehold(Some(&url), &define("add")).await;
    assert_exit(&out, 3);
    assert_eq!(json(&out)["outcome"], "exists");
    let out = leasehold(Some(&url), &define("update")).await;
    assert_exit(&out, 0);
    let doc = json(&out);
    assert_eq!(doc["outcome"], "updated");
    assert!(doc["version"].as_i64().unwrap() >= 1, "{doc}");
    let out = leasehold(Some(&url), &["remove", "kind", "key", "--json"]).await;
    assert_exit(&out, 0);
    assert_eq!(json(&out)["outcome"], "removed");
    let out = leasehold(Some(&url), &["remove", "kind", "key", "--json"]).await;
    assert_exit(&out, 4);
    assert_eq!(json(&out)["outcome"], "not-found");
}

/// Every duration flag takes the syntax of `--every`: `10s`, `1m`; a bare
/// number is a usage error that says how to write it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_duration_flag_takes_units() {
    let db = migrated_db().await;
    let url = url(&db);
    let out = leasehold(Some(&url), &["status", "--connect-timeout", "5s"]).await;
    assert_exit(&out, 0);
    let out = leasehold(Some(&url), &["status", "--connect-timeout", "1m30s"]).await;
    assert_exit(&out, 0);
    for (args, says) in [
        (&["status", "--connect-timeout", "10"][..], "write \"10s\" for seconds"),
        (&["status", "--connect-timeout", "2h"], "at most 1h"),
        (&["status", "--connect-timeout", "1.5s"], "fractions are not supported"),
        (&["console", "--refresh", "5"], "write \"5s\" for seconds"),
        (&["console", "--refresh", "1s500ms"], "whole seconds"),
    ] {
        let out = leasehold(Some(&url), args).await;
        assert_exit(&out, 2);
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
}

/// Without `DATABASE_URL`, the libpq variables name the database; a value
/// sqlx would silently replace by its default is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libpq_variables_name_the_database_without_database_url() {
    let db = migrated_db().await;
    let o = &db.options;
    let port = o.get_port().to_string();
    let pg = [
        ("PGHOST", o.get_host()),
        ("PGPORT", port.as_str()),
        ("PGUSER", o.get_username()),
        ("PGDATABASE", db.name.as_str()),
    ];
    let out = leasehold_env(None, &["migrate"], &pg).await;
    assert_exit(&out, 0);
    let name = format!("{}@{}:{port}/{}", o.get_username(), o.get_host(), db.name);
    assert!(
        stdout(&out).contains(&format!("leasehold schema in {name} is already at version")),
        "{}",
        stdout(&out)
    );

    // A URL wins over the variables.
    let mut wrong = pg.to_vec();
    wrong[1] = ("PGPORT", "1");
    let out = leasehold_env(Some(&url(&db)), &["status"], &wrong).await;
    assert_exit(&out, 0);
    // Without a URL they are what is used: a wrong port fails, naming them.
    let out = leasehold_env(None, &["status"], &wrong).await;
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("check the PG* variables"), "{}", stderr(&out));

    // PGSSLMODE is honoured (this server has no TLS) and a misspelt one refused.
    let mut with = pg.to_vec();
    with.push(("PGSSLMODE", "require"));
    let out = leasehold_env(None, &["status"], &with).await;
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("TLS failed"), "{}", stderr(&out));
    with[4] = ("PGSSLMODE", "verify_full");
    let out = leasehold_env(None, &["status"], &with).await;
    assert_exit(&out, 2);
    assert!(
        stderr(&out).contains("PGSSLMODE=verify_full: not an sslmode"),
        "{}",
        stderr(&out)
    );
    with[4] = ("PGPORT", "54x32");
    let out = leasehold_env(None, &["status"], &with).await;
    assert_exit(&out, 2);
    assert!(
        stderr(&out).contains("PGPORT=54x32: not a port number"),
        "{}",
        stderr(&out)
    );
}

/// `--help` lists the exit codes the commands use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_lists_the_exit_codes_the_commands_use() {
    let out = leasehold(None, &["--help"]).await;
    assert_exit(&out, 0);
    let help = stdout(&out).split_whitespace().collect::<Vec<_>>().join(" ");
    for says in [
        "0 ok (also when standard output is closed early",
        "add of a key that exists",
        "update or remove of a key that is not a key of the kind",
        "resume of something not paused",
        "limit set on a job no key has",
    ] {
        assert!(help.contains(says), "{says:?} in\n{help}");
    }
}

/// A table's columns line up on a terminal when keys hold CJK characters
/// (two columns each) or combining marks (none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_align_wide_and_combining_characters() {
    let db = migrated_db().await;
    let url = url(&db);
    let store = LeaseStore::new(db.pool.clone());
    let keys = ["請求:東京", "cafe\u{301}:billing", "plain:key"];
    for key in keys {
        acquired(store.claim(key, "web-1", LONG).await.unwrap());
    }
    let out = leasehold(Some(&url), &["status"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    let header = text.lines().find(|l| l.starts_with("KEY")).expect("a header");
    let column = |line: &str, word: &str| line[..line.find(word).expect(word)].width();
    let state = column(header, "STATE");
    let holder = column(header, "HOLDER");
    for key in keys {
        let line = text
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("{key} in\n{text}"));
        assert_eq!(column(line, "held"), state, "STATE of {key} lines up:\n{text}");
        assert_eq!(column(line, "web-1"), holder, "HOLDER of {key} lines up:\n{text}");
    }
}

/// `completions SHELL` prints a script for that shell without a database,
/// generated from the same definitions that parse the arguments: every
/// command is in it. An unknown shell is a usage error naming the ones
/// there are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_for_each_shell_without_a_database() {
    let commands = [
        "status",
        "history",
        "pause",
        "resume",
        "trigger",
        "limit",
        "revoke",
        "forget",
        "add",
        "update",
        "remove",
        "migrate",
        "check",
        "console",
        "completions",
    ];
    for (shell, marker) in [
        ("bash", "_leasehold()"),
        ("zsh", "#compdef leasehold"),
        ("fish", "complete -c leasehold"),
        ("elvish", "edit:completion:arg-completer[leasehold]"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let out = leasehold(None, &["completions", shell]).await;
        assert_exit(&out, 0);
        let script = stdout(&out);
        assert!(script.contains(marker), "{shell}: no {marker:?} in\n{script}");
        for command in commands {
            assert!(script.contains(command), "{shell}: no {command:?} in the script");
        }
        assert!(script.contains("database-url"), "{shell}: the global flags are there");
    }

    let out = leasehold(None, &["completions", "tcsh"]).await;
    assert_exit(&out, 2);
    let err = stderr(&out);
    assert!(
        err.contains("tcsh") && err.contains("bash") && err.contains("zsh"),
        "{err}"
    );
}
