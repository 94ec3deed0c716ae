//! Many keys added and removed while three replicas run them.

use std::collections::HashMap;
use std::time::Duration;

use leasehold::NewKey;
use tokio::time::Instant;

use super::{TenantKind, replica, tenant};
use crate::support;

/// Three replicas register the kind; 1,000 keys due every 2 s are added
/// through the first in one statement; while they run, 500 of them are
/// removed through the second and 500 new ones added through the third.
/// Every (key, slot) runs at most once across the fleet; no removed key
/// starts a run once every replica has synced (a notification, at most a
/// poll interval after the removal); every key left runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_and_a_thousand_keys_added_and_removed_while_running() {
    let db = support::db().await;
    let kind = TenantKind::working(Duration::ZERO);
    let poll = Duration::from_millis(500);
    let mut replicas = Vec::new();
    for r in 0..3 {
        replicas.push(replica(&db, &format!("r{r}"), &kind, poll, true).await);
    }
    let first: Vec<NewKey> = (0..1000)
        .map(|i| tenant(&format!("t:{i}"), "basic", "every 2s"))
        .collect();
    assert_eq!(replicas[0].store().keys().add(&first).await.unwrap(), 1000);
    // Every first key runs before half of them are removed.
    support::eventually(RUN_WITHIN, || never_ran(&kind, 0..1000).is_empty().then_some(())).await;

    for i in 0..500 {
        assert!(
            replicas[1]
                .store()
                .keys()
                .remove("tenant", &format!("t:{i}"))
                .await
                .unwrap()
        );
    }
    let removed = Instant::now();
    let more: Vec<NewKey> = (1000..1500)
        .map(|i| tenant(&format!("t:{i}"), "basic", "every 2s"))
        .collect();
    assert_eq!(replicas[2].store().keys().add(&more).await.unwrap(), 500);
    // Every replica has synced by then: a notification, or its next poll.
    let settled = removed + poll + Duration::from_millis(500);
    // Every key left runs; and the removed ones get `WATCH` (two and a
    // half of their periods) after `settled` to show a run they must not start.
    support::eventually(RUN_WITHIN, || never_ran(&kind, 500..1500).is_empty().then_some(())).await;
    tokio::time::sleep_until(settled + WATCH).await;
    for r in &replicas {
        r.shutdown().await;
    }

    let runs = kind.log.lock().unwrap().clone();
    let mut per_slot: HashMap<(&str, chrono::DateTime<chrono::Utc>), usize> = HashMap::new();
    for run in &runs {
        let slot = run.slot.expect("scheduled runs have a slot");
        *per_slot.entry((&run.key, slot)).or_default() += 1;
    }
    let twice: Vec<_> = per_slot.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "(key, slot) run more than once: {twice:?}");
    assert!(runs.len() > 1000, "the keys ran: {} runs", runs.len());
    let late: Vec<_> = runs
        .iter()
        .filter(|r| r.started > settled)
        .filter(|r| r.key.trim_start_matches("t:").parse::<u32>().is_ok_and(|i| i < 500))
        .collect();
    assert!(late.is_empty(), "removed keys ran after every replica synced: {late:?}");
    let missing = never_ran(&kind, 500..1500);
    assert!(
        missing.is_empty(),
        "keys left that never ran: {} (e.g. {:?})",
        missing.len(),
        missing.first()
    );
}

/// How long after every replica synced the removed keys (due every 2 s)
/// are watched for a run.
const WATCH: Duration = Duration::from_secs(5);

/// How long a thousand keys may take to each run once, on a loaded machine.
const RUN_WITHIN: Duration = Duration::from_secs(60);

/// The keys `t:{i}` for `i` in `range` that have not run yet.
fn never_ran(kind: &TenantKind, range: std::ops::Range<u32>) -> Vec<String> {
    let log = kind.log.lock().unwrap();
    let ran: std::collections::HashSet<&str> = log.iter().map(|r| r.key.as_str()).collect();
    range
        .map(|i| format!("t:{i}"))
        .filter(|k| !ran.contains(k.as_str()))
        .collect()
}
