//! The server closes the connections of a store that owns its pool (a
//! restart, a failover, `pg_terminate_backend`): such a pool does not ping
//! idle connections before use, so each dead one fails a statement once and
//! is discarded, and the store carries on on fresh ones.

use leasehold::store::{Claim, LeaseStore, Renewal};

use crate::support::{self, LONG};

/// Both connections of an owned store are terminated by the server. A
/// renewal still succeeds at its first call (it is retried at once on
/// another connection); a claim fails at most once per dead connection,
/// then succeeds on a fresh one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owned_store_recovers_when_the_server_terminates_its_connections() {
    let db = support::db().await;
    let store = LeaseStore::connect((*db.pool.connect_options()).clone())
        .await
        .expect("the store connects");
    let (a, b) = tokio::join!(store.claim("a", "h", LONG), store.claim("b", "h", LONG));
    let lease = a.unwrap().acquired().expect("a is free");
    assert!(matches!(b.unwrap(), Claim::Acquired(_)));
    let open = store.pool().size();

    let killed = support::terminate_other_backends(&db.pool).await;
    assert!(
        killed >= i64::from(open),
        "the store's {open} connections were terminated ({killed})"
    );

    let renewed = store
        .renew(&lease, LONG)
        .await
        .expect("the renewal retries on a live connection");
    assert!(matches!(renewed, Renewal::Renewed(_)), "{renewed:?}");
    let mut failed = Vec::new();
    let claim = loop {
        match store.claim("c", "h", LONG).await {
            Ok(claim) => break claim,
            Err(error) => {
                failed.push(error.to_string());
                assert!(failed.len() <= 2, "one failure per dead connection at most: {failed:?}");
            }
        }
    };
    assert!(matches!(claim, Claim::Acquired(_)), "{claim:?}");
    println!("measured: {open} connections terminated; claims failed before a fresh one: {failed:?}");
}
