//! Stored keys that do not run are visible: a key whose arguments no longer
//! deserialize, and a key of a kind no live replica registers, are badged
//! on the leases page, explained on their key page (a key with no lease row
//! included), and counted and listed on the kinds page; their text escaped.

use std::time::Duration;

use leasehold::console::ConsoleOptions;
use leasehold::{NewKey, Schedule, store::LeaseStore};

use super::http::{Page, console, enc, get};
use crate::fleet::{TenantKind, replica, tenant};
use crate::support;

/// A key whose name and arguments are markup.
const HOSTILE: &str = "old:<script>alert(1)</script>";

/// The HTML of the table row whose `attr` is `value`.
fn row<'a>(page: &'a Page, attr: &str, value: &str) -> &'a str {
    let rest = page
        .body
        .split(&format!("{attr}=\"{value}\""))
        .nth(1)
        .unwrap_or_else(|| panic!("no row {attr}={value}: {}", page.body));
    rest.split("</tr>").next().unwrap_or_default()
}

/// Replica A runs the `tenant` kind. Of its three stored keys, one runs,
/// one was updated to arguments the kind cannot read, and one is of the
/// kind `retired` no replica registers (so it never got a lease row). Each
/// page says which do not run and why; once A is gone, its kind's keys are
/// badged as run nowhere too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_which_stored_keys_do_not_run_and_why() {
    let db = support::db().await;
    let kind = TenantKind::working(Duration::from_millis(10));
    let store = LeaseStore::new(db.pool.clone());
    let retired = NewKey::new(
        "retired",
        HOSTILE,
        &serde_json::json!({ "plan": "<b>gold</b>" }),
        Schedule::Manual,
    )
    .unwrap();
    store
        .keys()
        .add(&[
            tenant("tenant:ok", "basic", "manual"),
            tenant("tenant:broken", "basic", "manual"),
            retired,
        ])
        .await
        .unwrap();
    let a = replica(&db, "a", &kind, Duration::from_millis(100), true).await;
    support::eventually(Duration::from_secs(5), || (a.health().registered == 2).then_some(())).await;
    let unreadable = NewKey::new(
        "tenant",
        "tenant:broken",
        &serde_json::json!({ "plan": 42 }),
        Schedule::Manual,
    )
    .unwrap();
    assert_eq!(store.keys().update(&unreadable).await.unwrap(), Some(2));
    support::eventually_async(Duration::from_secs(5), || async {
        let row = store.keys().get("tenant:broken").await.unwrap().unwrap();
        row.args_error.map(drop)
    })
    .await;
    let app = console(&db.pool, ConsoleOptions::new());

    let leases = get(&app, "/", &[]).await;
    assert_eq!(leases.listed_keys(), ["tenant:broken", "tenant:ok"]);
    let broken = row(&leases, "data-key", "tenant:broken");
    assert!(broken.contains("unreadable arguments"), "{broken}");
    assert!(
        broken.contains("do not deserialize"),
        "the badge's title says why: {broken}"
    );
    assert!(!row(&leases, "data-key", "tenant:ok").contains("not-run"));

    let page = get(&app, "/key?key=tenant:broken", &[]).await;
    assert_eq!(page.status, 200);
    let why = page
        .body
        .split("id=\"not-run\"")
        .nth(1)
        .expect("the reason it is not run");
    assert!(
        why.contains("version 2 is not run") && why.contains("expected a string"),
        "{why}"
    );

    // No lease row, but a stored key: its page says what it is and why it
    // does not run, instead of "not found".
    let page = get(&app, &format!("/key?key={}", enc(HOSTILE)), &[]).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("no live replica registers the kind"),
        "{}",
        page.body
    );
    assert!(page.body.contains("&lt;b&gt;gold&lt;/b&gt;"), "the arguments, escaped");

    let kinds = get(&app, "/kinds", &[]).await;
    assert_eq!(kinds.status, 200);
    let tenant_row = row(&kinds, "data-kind", "tenant");
    assert!(tenant_row.contains("<td class=\"live\">yes</td>"), "{tenant_row}");
    assert!(tenant_row.contains("<td class=\"keys\">2</td>"), "{tenant_row}");
    assert!(
        tenant_row.contains(">1</span>"),
        "one key with unreadable arguments: {tenant_row}"
    );
    let retired_row = row(&kinds, "data-kind", "retired");
    assert!(retired_row.contains("its keys run nowhere"), "{retired_row}");
    assert!(retired_row.contains("<td class=\"keys\">1</td>"), "{retired_row}");
    let not_run: Vec<&str> = kinds
        .body
        .split("<tr class=\"not-run\" data-key=\"")
        .skip(1)
        .map(|r| r.split('"').next().unwrap_or_default())
        .collect();
    assert_eq!(not_run, ["old:&lt;script&gt;alert(1)&lt;/script&gt;", "tenant:broken"]);
    for page in [&leases, &kinds] {
        assert!(!page.body.contains("<script>alert"), "hostile text escaped");
    }

    a.shutdown().await;
}

/// A key of a kind whose replicas are gone (its lease row left by the
/// last one to run it) is badged on the leases page as run nowhere.
#[tokio::test]
async fn a_key_whose_kind_no_replica_runs_is_badged_on_the_leases_page() {
    let (db, store) = support::store().await;
    let legacy = NewKey::new("retired", "legacy:1", &1, Schedule::Manual).unwrap();
    store.keys().add(&[legacy]).await.unwrap();
    // The lease row its last replica left behind.
    store.claim("legacy:1", "replica-gone", support::LONG).await.unwrap();
    let lease = store.get("legacy:1").await.unwrap().expect("row");
    assert!(store.release("legacy:1", "replica-gone", lease.fence).await.unwrap());
    store.claim("plain", "replica-1", support::LONG).await.unwrap();
    let app = console(&db.pool, ConsoleOptions::new());

    let leases = get(&app, "/", &[]).await;
    assert_eq!(leases.listed_keys(), ["legacy:1", "plain"]);
    let legacy = row(&leases, "data-key", "legacy:1");
    assert!(legacy.contains("kind not run"), "{legacy}");
    assert!(legacy.contains("no live replica registers the kind"), "{legacy}");
    assert!(
        !row(&leases, "data-key", "plain").contains("not-run"),
        "a key that is no stored key has no badge"
    );
}

/// A key of a kind that ran once, then was removed: the leases page badges
/// it `removed` (listed under the `removed` filter, not under `free`), its
/// key page says how to forget it and marks its run as of an earlier life.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_key_is_shown_removed_and_its_runs_as_of_an_earlier_life() {
    let db = support::db().await;
    let store = LeaseStore::new(db.pool.clone());
    store
        .keys()
        .add(&[tenant("tenant:gone", "basic", "manual")])
        .await
        .unwrap();
    let lease = match store
        .claim("tenant:gone", "web-1", Duration::from_secs(60))
        .await
        .unwrap()
    {
        leasehold::store::Claim::Acquired(lease) => lease,
        other => panic!("{other:?}"),
    };
    assert!(store.release_recorded(&lease, 1, 100).await.unwrap());
    assert!(store.keys().remove("tenant", "tenant:gone").await.unwrap());
    let app = console(&db.pool, ConsoleOptions::new());

    let leases = get(&app, "/", &[]).await;
    let gone = row(&leases, "data-key", "tenant:gone");
    assert!(gone.contains("badge removed"), "{gone}");
    assert!(gone.contains("(earlier life)"), "its last run: {gone}");
    assert!(get(&app, "/?state=free", &[]).await.listed_keys().is_empty());
    assert_eq!(get(&app, "/?state=removed", &[]).await.listed_keys(), ["tenant:gone"]);

    let page = get(&app, "/key?key=tenant:gone", &[]).await;
    assert!(page.body.contains("removed-note"), "{}", page.body);
    assert!(page.body.contains("leasehold forget KEY"), "{}", page.body);
    assert!(page.body.contains("(earlier life)"), "{}", page.body);
}
