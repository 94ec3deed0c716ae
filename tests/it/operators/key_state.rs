//! A key's state as operators read it: held, free (claimed at least once),
//! never-run (registered by a runtime, never claimed) or paused — one
//! vocabulary for `KeyStatus::state`, `LeaseInfo::state` and the
//! `list_page` filter.

use leasehold::{
    Schedule,
    store::{KeyFilter, KeyState, LeaseStore},
};

use crate::support::{self, LONG};

/// Three keys: "report:registered" a runtime registered and never ran,
/// "ran" claimed and released, "running" claimed. Each reads as its own
/// state, and each filter selects exactly the keys in that state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_never_run_free_or_held_reads_and_filters_as_such() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    let runtime = support::replica(
        &db,
        "replica-1",
        1,
        vec![support::job(
            "report:registered",
            support::quick(Schedule::Manual, LONG),
            |_| async { Ok(()) },
        )],
    )
    .await;
    runtime.shutdown().await;
    let ran = store.claim("ran", "replica-1", LONG).await.expect("claim").acquired();
    let ran = ran.expect("a free key is claimed");
    assert!(store.release(&ran.key, &ran.holder, ran.fence).await.expect("release"));
    store.claim("running", "replica-1", LONG).await.expect("claim");

    let states: Vec<(String, KeyState)> = store
        .records()
        .list("")
        .await
        .expect("list")
        .into_iter()
        .map(|k| (k.lease.key.clone(), k.state()))
        .collect();
    assert_eq!(
        states,
        [
            ("ran".to_owned(), KeyState::Free),
            ("report:registered".to_owned(), KeyState::NeverRun),
            ("running".to_owned(), KeyState::Held),
        ]
    );
    let registered = store.get("report:registered").await.expect("get").expect("a row");
    assert_eq!(registered.state(), KeyState::NeverRun);

    for (state, keys) in [
        (KeyState::Free, vec!["ran"]),
        (KeyState::NeverRun, vec!["report:registered"]),
        (KeyState::Held, vec!["running"]),
        (KeyState::Paused, vec![]),
    ] {
        let page = store
            .records()
            .list_page(&KeyFilter::new().state(state))
            .await
            .expect("a page");
        let listed: Vec<&str> = page.keys.iter().map(|k| k.lease.key.as_str()).collect();
        assert_eq!(listed, keys, "filter {state}");
    }
    assert_eq!(KeyState::parse("never-run").expect("a state"), KeyState::NeverRun);
    assert_eq!(KeyState::NeverRun.to_string(), "never-run");
}
