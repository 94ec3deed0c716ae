//! Waiting for a condition: poll it until it holds, or until a deadline.
//!
//! One loop, [`wait_for_async`]; the others are views of it. Tests use
//! [`eventually`] (panics at the deadline); benchmarks use [`wait_for`]
//! (`None` at the deadline, counted as a failed trial). For waiting on an
//! outcome, never for asserting a speed. Time is tokio's, so a test with
//! paused time advances it instead of sleeping.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// How often [`eventually`] and [`eventually_async`] check.
pub const EVENTUALLY_EVERY: Duration = Duration::from_millis(20);

/// Checks `check` every `every` until it returns `Some`; `None` once
/// `within` has passed (it is checked once more at the deadline).
pub async fn wait_for_async<T, F, Fut>(within: Duration, every: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(every).await;
    }
}

/// [`wait_for_async`] for a check that does not await.
pub async fn wait_for<T>(within: Duration, every: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    wait_for_async(within, every, || std::future::ready(check())).await
}

/// Checks `check` every [`EVENTUALLY_EVERY`] until it returns `Some`, or
/// panics after `within`.
pub async fn eventually<T>(within: Duration, check: impl FnMut() -> Option<T>) -> T {
    wait_for(within, EVENTUALLY_EVERY, check)
        .await
        .unwrap_or_else(|| panic!("condition not reached within {within:?}"))
}

/// Like [`eventually`], for a check that awaits (one that talks to the
/// database).
pub async fn eventually_async<T, F, Fut>(within: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    wait_for_async(within, EVENTUALLY_EVERY, check)
        .await
        .unwrap_or_else(|| panic!("condition not reached within {within:?}"))
}
