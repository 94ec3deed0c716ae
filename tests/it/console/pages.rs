//! What the console's pages show: the leases (filtered), one key's tenure,
//! runs, fences and actions, the fleet, and relative links under a prefix.

use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use leasehold::console::ConsoleOptions;
use leasehold::{
    Schedule,
    operator::{Operator, Revoke, Target},
    store::LeaseStore,
};

use super::http::{console, enc, get};
use crate::support::{self, LONG, job, quick, replica};

/// A free key, a held key, a paused key and a paused key whose run is
/// still finishing (held) under prefix `a-`; one key elsewhere.
async fn five_keys(store: &LeaseStore) {
    for key in ["a-free", "a-held", "a-paused", "a-paused-held", "b-other"] {
        store.claim(key, "replica-1", LONG).await.expect("claim");
    }
    for key in ["a-free", "a-paused", "b-other"] {
        let lease = store.get(key).await.expect("get").expect("row");
        assert!(store.release(key, "replica-1", lease.fence).await.expect("release"));
    }
    let op = Operator::new(store.clone(), "alice").expect("operator");
    for key in ["a-paused", "a-paused-held"] {
        op.pause(&Target::key(key).unwrap(), false).await.expect("pause");
    }
}

#[tokio::test]
async fn the_leases_page_lists_every_key_with_its_state_and_filters_by_prefix_and_state() {
    let (db, store) = support::store().await;
    five_keys(&store).await;
    let app = console(&db.pool, ConsoleOptions::new());

    let all = get(&app, "/", &[]).await;
    assert_eq!(all.status, StatusCode::OK);
    assert_eq!(
        all.listed_keys(),
        ["a-free", "a-held", "a-paused", "a-paused-held", "b-other"]
    );
    let states = [
        ("a-free", "free"),
        ("a-held", "held"),
        ("a-paused", "paused"),
        ("a-paused-held", "paused"),
    ];
    for (key, state) in states {
        let row = all.body.split(&format!("data-key=\"{key}\"")).nth(1).expect("row");
        let cell = row.split("<td class=\"state\">").nth(1).expect("state cell");
        assert!(cell.contains(&format!(">{state}<")), "{key} should read {state}");
    }
    assert!(all.body.contains("replica-1"), "the holder is shown");

    assert_eq!(
        get(&app, "/?prefix=a-", &[]).await.listed_keys(),
        ["a-free", "a-held", "a-paused", "a-paused-held"]
    );
    // A paused key whose run is finishing is paused, not held: the state
    // an operator acts on.
    assert_eq!(get(&app, "/?state=held", &[]).await.listed_keys(), ["a-held"]);
    assert_eq!(
        get(&app, "/?state=paused", &[]).await.listed_keys(),
        ["a-paused", "a-paused-held"]
    );
    assert_eq!(get(&app, "/?prefix=a-&state=free", &[]).await.listed_keys(), ["a-free"]);
    let bad = get(&app, "/?state=sleepy", &[]).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.body.contains("use all, paused, held or free"), "{}", bad.body);
}

#[tokio::test]
async fn the_leases_page_goes_a_page_at_a_time_over_many_keys() {
    let (db, store) = support::store().await;
    let keys: Vec<String> = (0..450).map(|i| format!("tenant-{i:04}")).collect();
    for key in &keys {
        store.claim(key, "replica-1", LONG).await.expect("claim");
    }
    let app = console(&db.pool, ConsoleOptions::new());
    let mut seen = Vec::new();
    let mut uri = "/?prefix=tenant-".to_owned();
    // Three pages; a cursor that went nowhere would repeat the first.
    for _ in 0..5 {
        let page = get(&app, &uri, &[]).await;
        let listed = page.listed_keys();
        assert!(listed.len() <= 200, "a page shows at most 200 keys");
        seen.extend(listed);
        let Some(at) = page.body.find("id=\"next\" href=\"") else {
            break;
        };
        let href = page.body[at + 16..]
            .split('"')
            .next()
            .expect("href")
            .replace("&amp;", "&");
        uri = format!("/{}", href.trim_start_matches("./"));
    }
    assert_eq!(seen, keys, "every key once, in order, over three pages");
}

#[tokio::test]
async fn the_key_page_shows_tenure_runs_fences_and_who_acted() {
    let (db, store) = support::store().await;
    store.claim("ledger", "replica-1", LONG).await.expect("claim");
    store.record_runs_for_test("ledger", 1..=3, 100).await.expect("runs");
    let op = Operator::new(store.clone(), "alice@laptop").expect("operator");
    op.trigger("ledger").await.expect("trigger");
    let released = op.revoke("ledger", Revoke::Force, &[]).await.expect("revoke");
    let leasehold::operator::Revoked::Ended { fence, .. } = released else {
        panic!("ended: {released:?}")
    };
    let app = console(&db.pool, ConsoleOptions::new());

    let page = get(&app, "/key?key=ledger", &[]).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("<h1 id=\"key\"><bdi>ledger</bdi></h1>"));
    assert_eq!(
        page.body.matches("<tr class=\"run\">").count(),
        3,
        "the three recorded runs"
    );
    let actions = page.body.split("<table id=\"actions\">").nth(1).expect("actions table");
    assert!(
        actions.contains("force-revoke") && actions.contains("trigger"),
        "both actions listed"
    );
    assert!(actions.contains("alice@laptop"), "with who took them");
    let fences = page.body.split("<table id=\"fences\">").nth(1).expect("fence table");
    assert!(
        fences.contains(&format!("<td>{fence}</td>")),
        "the release's fence is in the fence history"
    );
    assert!(page.body.contains("(server clock)"), "absolute server time on hover");
    assert!(
        !page.body.contains("id=\"action-pause\""),
        "read-only: no action offered"
    );

    let missing = get(&app, "/key?key=nope", &[]).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(missing.body.contains("No lease row"));
}

#[tokio::test]
async fn the_fleet_page_lists_holders_and_their_runs_in_progress() {
    let (db, store) = support::store().await;
    for (key, holder) in [("k1", "replica-a"), ("k2", "replica-a"), ("k3", "replica-b")] {
        store.claim(key, holder, LONG).await.expect("claim");
    }
    // A replica that registered a manual key and never ran it holds no
    // tenure: its registration row is not a sighting.
    let idle = job("idle:k", quick(Schedule::Manual, LONG), |_| async { Ok(()) });
    let runtime = replica(&db, "replica-idle", 2, vec![idle]).await;
    let lease = store.get("k3").await.expect("get").expect("row");
    store.release("k3", "replica-b", lease.fence).await.expect("release");
    let fleet = store.fleet(Duration::from_secs(60)).await.expect("fleet");
    let running: Vec<(&str, usize)> = fleet
        .holders
        .iter()
        .map(|h| (h.holder.as_str(), h.running.len()))
        .collect();
    assert_eq!(running, [("replica-a", 2), ("replica-b", 0)]);

    let app = console(&db.pool, ConsoleOptions::new());
    let page = get(&app, "/fleet", &[]).await;
    let row_a = page
        .body
        .split("data-holder=\"replica-a\"")
        .nth(1)
        .expect("replica-a listed");
    assert!(
        row_a
            .split("</tr>")
            .next()
            .unwrap_or_default()
            .contains("<td class=\"running\">2</td>")
    );
    assert!(
        page.body.contains("data-holder=\"replica-b\""),
        "a holder that released recently is seen"
    );
    runtime.shutdown().await;
}

#[tokio::test]
async fn mounted_under_a_prefix_every_link_stays_under_it() {
    let db = support::db().await;
    let idle = || quick(Schedule::Manual, Duration::from_secs(5));
    let jobs = vec![
        job("solo:key", idle(), |_| async { Ok(()) }),
        job("pair:one", idle(), |_| async { Ok(()) }),
        job("pair:two", idle(), |_| async { Ok(()) }),
    ];
    let runtime = replica(&db, "replica-1", 2, jobs).await;
    let app: Router = Router::new().nest_service("/ops/leasehold", console(&db.pool, ConsoleOptions::new()));

    for uri in ["/ops/leasehold", "/ops/leasehold/", "/ops/leasehold/fleet"] {
        let page = get(&app, uri, &[]).await;
        assert_eq!(page.status, StatusCode::OK, "{uri}: {}", page.body);
        assert!(
            page.body.contains("<base href=\"/ops/leasehold/\">"),
            "{uri}: {}",
            page.body
        );
    }
    let key = get(&app, &format!("/ops/leasehold/key?key={}", enc("solo:key")), &[]).await;
    assert_eq!(key.status, StatusCode::OK);
    let css = get(&app, "/ops/leasehold/assets/console.css", &[]).await;
    assert_eq!(css.status, StatusCode::OK);
    assert!(
        css.headers["content-type"]
            .to_str()
            .unwrap_or_default()
            .starts_with("text/css")
    );

    // Grafana's per-job links open the job's page: its keys.
    let solo = get(&app, "/ops/leasehold/job?name=solo", &[]).await;
    assert_eq!(solo.status, StatusCode::OK);
    assert!(solo.body.contains("<base href=\"/ops/leasehold/\">"));
    assert_eq!(solo.listed_keys(), ["solo:key"]);
    let pair = get(&app, "/ops/leasehold/job?name=pair", &[]).await;
    assert_eq!(pair.listed_keys(), ["pair:one", "pair:two"]);
    runtime.shutdown().await;
}

#[tokio::test]
async fn a_forced_revoke_owns_the_fence_it_handed_out() {
    let (db, store) = support::store().await;
    let leasehold::store::Claim::Acquired(held) = store.claim("ledger", "replica-x", LONG).await.expect("claim") else {
        panic!("claimed")
    };
    let op = Operator::new(store.clone(), "alice@laptop").expect("operator");
    let leasehold::operator::Revoked::Ended { fence, .. } =
        op.revoke("ledger", Revoke::Force, &[]).await.expect("revoke")
    else {
        panic!("the tenure ends")
    };
    assert!(fence > held.fence);
    let app = console(&db.pool, ConsoleOptions::new());

    let page = get(&app, "/key?key=ledger", &[]).await;
    let holder = page
        .body
        .split("id=\"holder\">")
        .nth(1)
        .expect("holder")
        .split("</dd>")
        .next()
        .expect("dd");
    assert!(
        !holder.contains("replica-x"),
        "the release's fence is not replica-x's tenure: {holder}"
    );
    assert!(
        holder.contains("revoked by") && holder.contains("alice@laptop"),
        "{holder}"
    );
    let fences = page.body.split("<table id=\"fences\">").nth(1).expect("fence table");
    let row = fences
        .split(&format!("<td>{fence}</td>"))
        .nth(1)
        .expect("the release's fence")
        .split("</tr>")
        .next()
        .expect("row");
    assert!(row.contains("alice@laptop") && row.contains("force-revoke"), "{row}");
}
