//! Wake-up (section 10 of the output) with default settings (the poll
//! interval is not set): how soon a runtime notices work that another runtime
//! made available.
//!
//! - Trigger: two runtimes register the same manual key; `A.trigger(key)`
//!   until the run body starts, on whichever runtime.
//! - Graceful handover: A holds a scheduled key with a run that lasts until
//!   cancelled; `A.shutdown()` until B's run of that key starts.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold::{FenceGuard, JobSettings, Schedule};

use crate::report::{ms, pct, progress, table};
use crate::setup::{Bench, POLL, ScriptedJob, drop_db, fresh_db, job, runtime, wait_for};

/// Run starts: holder and instant.
type Starts = Arc<Mutex<Vec<(String, Instant)>>>;

/// How long a trial waits for a run to start before it counts as missed.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A job on `key` whose body records its start, then returns at once
/// (`hold` false) or runs until cancelled (`hold` true).
fn recording_job(key: &str, schedule: Schedule, hold: bool, starts: Starts) -> ScriptedJob {
    job(key, JobSettings::new(schedule), move |guard: FenceGuard| {
        let starts = starts.clone();
        async move {
            starts.lock().unwrap().push((guard.holder().to_owned(), Instant::now()));
            if hold {
                guard.cancelled().await;
                return Err("cancelled".into());
            }
            Ok(())
        }
    })
    .named("wakeup")
}

/// The `i`-th run start recorded, once there is one.
async fn nth_start(starts: &Starts, i: usize) -> Option<(String, Instant)> {
    wait_for(TIMEOUT, POLL, || starts.lock().unwrap().get(i).cloned()).await
}

pub(crate) async fn wakeup(b: &Bench) {
    progress("10. wake-up");
    let (db, _) = fresh_db(&b.server).await;
    let (trigger_trials, handover_trials) = if b.smoke { (3, 1) } else { (20, 10) };

    // (a) Trigger → run start, two runtimes on one manual key.
    let starts: Starts = Arc::default();
    let key = "wakeup-manual";
    let job = || recording_job(key, Schedule::Manual, false, starts.clone());
    let (a, bh) = ("wakeup-a", "wakeup-b");
    let rt_a = runtime(db.pool_with(2).await, a, None, vec![job()]).await;
    let rt_b = runtime(db.pool_with(2).await, bh, None, vec![job()]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut trigger = Vec::new();
    let (mut on_a, mut on_b, mut missed) = (0, 0, 0);
    for i in 0..trigger_trials {
        if i % 5 == 0 {
            progress(&format!("   trigger, trial {i}"));
        }
        let seen = starts.lock().unwrap().len();
        let t0 = Instant::now();
        rt_a.trigger(key).await.expect("trigger");
        match nth_start(&starts, seen).await {
            Some((holder, t)) => {
                trigger.push(t - t0);
                if holder == a { on_a += 1 } else { on_b += 1 }
            }
            None => missed += 1,
        }
        // Let the run end and release its lease before the next trigger (a trigger that arrives while the
        // key runs starts its run only after that one, which would time the run, not the wake-up); the
        // pause varies so triggers fall at different phases.
        tokio::time::sleep(Duration::from_millis(300 + (i as u64 * 173) % 700)).await;
    }
    let runs = starts.lock().unwrap().len();
    rt_a.shutdown().await;
    rt_b.shutdown().await;

    // (b) Graceful handover: fresh runtimes per trial.
    let mut handover = Vec::new();
    let mut handover_missed = 0;
    for i in 0..handover_trials {
        progress(&format!("   graceful handover, trial {i}"));
        let starts: Starts = Arc::default();
        let key = format!("wakeup-hold-{i}");
        let job = || recording_job(&key, Schedule::every(Duration::from_secs(1)), true, starts.clone());
        let (a, bh) = (format!("wakeup-hold{i}-a"), format!("wakeup-hold{i}-b"));
        let rt_a = runtime(db.pool_with(2).await, &a, None, vec![job()]).await;
        if nth_start(&starts, 0).await.is_none() {
            handover_missed += 1;
            rt_a.shutdown().await;
            continue;
        }
        let rt_b = runtime(db.pool_with(2).await, &bh, None, vec![job()]).await;
        // Shut A down at a different time after B's start each trial, evenly spread over 5 s (the default
        // poll interval of today's runtime), so the shutdown falls at every phase of a periodic poll.
        let after = 250 + i as u64 * 5_000 / handover_trials as u64;
        tokio::time::sleep(Duration::from_millis(after)).await;
        let t0 = Instant::now();
        rt_a.shutdown().await;
        let next = wait_for(TIMEOUT, POLL, || {
            starts.lock().unwrap().iter().find(|(h, _)| *h == bh).map(|(_, t)| *t)
        })
        .await;
        match next {
            Some(t) => handover.push(t - t0),
            None => handover_missed += 1,
        }
        rt_b.shutdown().await;
    }
    drop_db(db).await;

    println!("## 10. Wake-up with default settings\n");
    println!(
        "Default settings throughout: the poll interval is not set, jobs use `JobSettings::new(schedule)` \
         (lease 60 s), each runtime on its own pool of 2.\n\n\
         - Trigger: runtimes A and B register the same `Schedule::Manual` key; {trigger_trials} times, \
         `A.trigger(key)` (its own statement included) until the run body starts, on whichever runtime; the body \
         returns at once, and the next trigger comes 0.3–1 s later.\n\
         - Graceful handover: {handover_trials} trial(s), fresh runtimes A and B in each. A registers a key \
         `Schedule::every(1s)` whose run lasts until cancelled and starts running it; then B starts with the \
         same key; 0.25 + 5 × i ÷ trials s later in trial i, `A.shutdown()` (cancel, release) until B's run of the \
         key starts.\n"
    );
    let row = |name: &str, v: &[Duration], missed: usize, note: String| {
        let mut s = v.to_vec();
        s.sort();
        vec![
            name.to_owned(),
            v.len().to_string(),
            missed.to_string(),
            ms(pct(&s, 0.50)),
            ms(pct(&s, 0.90)),
            ms(s.last().copied().unwrap_or_default()),
            note,
        ]
    };
    table(
        &[
            "wake-up",
            "trials",
            &format!("no run within {} s", TIMEOUT.as_secs()),
            "p50",
            "p90",
            "max",
            "notes",
        ],
        &[
            row(
                "trigger on A → run starts",
                &trigger,
                missed,
                format!("ran on A {on_a}×, on B {on_b}×; {runs} runs for {trigger_trials} triggers"),
            ),
            row(
                "A.shutdown() → B's run starts",
                &handover,
                handover_missed,
                String::new(),
            ),
        ],
    );
}
