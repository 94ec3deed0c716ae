//! The wake-up rule, on the registry alone: the scheduler's statements
//! are replaced by the answers they would bring, in the order a loaded
//! machine can deliver them.

use std::time::Duration;

use tokio::time::Instant;

use super::Registry;
use crate::runtime::state::testing::{LEASE, entry, held_elsewhere};
use crate::runtime::state::{Reading, ServerClock};

fn listening(now: Instant, clock: &ServerClock) -> Reading<'_> {
    Reading {
        now,
        listening: true,
        poll_interval: Duration::from_secs(60),
        clock,
    }
}

fn proposed(registry: &Registry, now: Instant) -> Vec<String> {
    registry.due(now, 8).iter().map(|j| j.key.to_string()).collect()
}

/// Claim sent → the holder's release is notified → the claim's answer
/// (from before the release) says "held for 30 s": the key stays due,
/// so the next pass claims it, instead of waiting out a lease that is
/// already released.
#[test]
fn a_notification_while_a_claim_is_in_flight_keeps_the_key_due() {
    let clock = ServerClock::default();
    let t0 = Instant::now();
    let mut registry = Registry::default();
    registry.insert(entry("k"), t0);

    assert_eq!(proposed(&registry, t0), ["k"], "the claim proposes k");
    let sent = registry.mark();
    registry.wake("k", t0 + Duration::from_millis(5));
    let answered = t0 + Duration::from_millis(10);
    registry.file(&[held_elsewhere("k")], sent, &listening(answered, &clock));

    assert_eq!(proposed(&registry, answered), ["k"], "k is claimed again at once");
    assert!(registry.next_at().is_some_and(|at| at <= answered));
}

/// Without a wake-up during the claim (one before it was sent does not
/// count, nor one of another key), the answer files the key at the
/// lease's expiry: the rule costs no claim when nothing happened.
#[test]
fn a_claim_answer_parks_the_key_when_no_notification_came_meanwhile() {
    let clock = ServerClock::default();
    let t0 = Instant::now();
    let mut registry = Registry::default();
    registry.insert(entry("k"), t0 + Duration::from_secs(5));
    registry.insert(entry("other"), t0 + Duration::from_secs(3600));
    registry.wake("k", t0);

    assert_eq!(proposed(&registry, t0), ["k"]);
    let sent = registry.mark();
    registry.wake("other", t0 + Duration::from_millis(5));
    let answered = t0 + Duration::from_millis(10);
    registry.file(&[held_elsewhere("k")], sent, &listening(answered, &clock));

    assert_eq!(proposed(&registry, answered), ["other"], "k waits, other was woken");
    assert_eq!(
        proposed(&registry, answered + LEASE - Duration::from_millis(1)),
        ["other"]
    );
    assert_eq!(proposed(&registry, answered + LEASE), ["other", "k"]);
}

/// A run's release is out → a trigger elsewhere commits after it and is
/// notified → the release answers "next due in an hour": the key is
/// back in the queue due now, not in an hour.
#[test]
fn a_notification_while_a_release_is_out_keeps_the_key_due() {
    let t0 = Instant::now();
    let mut registry = Registry::default();
    let job = entry("k");
    registry.insert(job.clone(), t0);
    assert!(registry.start(&job));

    let sent = registry.mark();
    registry.wake("k", t0 + Duration::from_millis(5));
    let answered = t0 + Duration::from_millis(10);
    registry.finish("k", answered + Duration::from_secs(3600), sent, answered);

    assert_eq!(proposed(&registry, answered), ["k"]);
}

/// The same release with no wake-up while it was out: due in an hour.
#[test]
fn a_release_answer_files_the_key_when_no_notification_came_meanwhile() {
    let t0 = Instant::now();
    let mut registry = Registry::default();
    let job = entry("k");
    registry.insert(job.clone(), t0);
    assert!(registry.start(&job));
    registry.wake("k", t0); // during the run, before the release: its answer saw it

    let sent = registry.mark();
    let answered = t0 + Duration::from_millis(10);
    let hour = answered + Duration::from_secs(3600);
    registry.finish("k", hour, sent, answered);

    assert!(proposed(&registry, answered).is_empty());
    assert_eq!(registry.next_at(), Some(hour));
}

/// The due queue on tokio's paused clock: keys come out earliest first
/// (ties by key), only once due, at most `max` at a time.
#[tokio::test(start_paused = true)]
async fn keys_come_due_in_order_and_at_most_max_at_a_time() {
    let t0 = Instant::now();
    let mut registry = Registry::default();
    for (key, secs) in [("c", 30), ("a", 10), ("b", 10), ("d", 3600)] {
        assert!(registry.insert(entry(key), t0 + Duration::from_secs(secs)));
    }
    assert_eq!(registry.len(), 4);
    assert!(proposed(&registry, Instant::now()).is_empty(), "nothing due yet");
    assert_eq!(registry.next_at(), Some(t0 + Duration::from_secs(10)));

    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(proposed(&registry, Instant::now()), ["a", "b"]);
    tokio::time::advance(Duration::from_secs(20)).await;
    assert_eq!(proposed(&registry, Instant::now()), ["a", "b", "c"]);
    let first_two: Vec<_> = registry
        .due(Instant::now(), 2)
        .iter()
        .map(|j| j.key.to_string())
        .collect();
    assert_eq!(first_two, ["a", "b"], "at most max, earliest first");

    registry.wait_until("a", t0 + Duration::from_secs(7200));
    assert_eq!(proposed(&registry, Instant::now()), ["b", "c"], "a moved later");
    registry.wake("d", Instant::now());
    assert_eq!(
        proposed(&registry, Instant::now()),
        ["b", "c", "d"],
        "a wake-up moves d to now"
    );
}

/// Adding, removing and adding back: a key is registered once, a removed
/// key leaves the queue and is remembered (for how long, on the paused
/// clock) until added back.
#[tokio::test(start_paused = true)]
async fn a_key_is_added_once_and_a_removed_key_is_remembered_until_added_back() {
    let mut registry = Registry::default();
    let now = Instant::now();
    assert!(registry.insert(entry("k"), now));
    assert!(!registry.insert(entry("k"), now), "registered twice");
    assert_eq!(registry.removed_for("k"), None);

    assert!(registry.remove("k").is_some());
    assert!(registry.remove("k").is_none(), "removed once");
    assert!(registry.job("k").is_none());
    assert!(proposed(&registry, Instant::now()).is_empty(), "out of the queue");
    assert_eq!(registry.next_at(), None);
    tokio::time::advance(Duration::from_secs(90)).await;
    assert_eq!(registry.removed_for("k"), Some(Duration::from_secs(90)));

    assert!(registry.insert(entry("k"), Instant::now()));
    assert_eq!(registry.removed_for("k"), None, "added back: a new registration");
    assert_eq!(proposed(&registry, Instant::now()), ["k"]);
}

/// A running key is out of the queue: no wake-up or answer files it, and
/// it comes back only when its run ends. A claim answered for a job that
/// was replaced by a new registration meanwhile starts nothing.
#[tokio::test(start_paused = true)]
async fn a_running_key_is_never_proposed_and_a_stale_claim_starts_nothing() {
    let now = Instant::now();
    let mut registry = Registry::default();
    let job = entry("k");
    registry.insert(job.clone(), now);
    assert!(registry.start(&job));
    assert!(!registry.start(&job), "running already");
    registry.wake("k", now);
    registry.wait_until("k", now);
    assert!(proposed(&registry, now).is_empty(), "a running key is not proposed");

    registry.remove("k");
    let again = entry("k");
    registry.insert(again.clone(), now + Duration::from_secs(5));
    let sent = registry.mark();
    registry.finish("k", now, sent, now);
    assert_eq!(
        registry.next_at(),
        Some(now + Duration::from_secs(5)),
        "the old run's end leaves the new registration where it is"
    );
    assert!(!registry.start(&job), "the claim was for the removed registration");
    assert!(registry.start(&again));
}

/// A resume wakes the waiting keys of the target only; the paused gauge
/// counts, per job, the keys the pauses in force cover.
#[tokio::test(start_paused = true)]
async fn a_resume_wakes_its_targets_keys_and_pauses_are_counted_per_job() {
    use crate::lease::Target;
    use crate::runtime::state::testing::entry_of;

    let later = Instant::now() + Duration::from_secs(3600);
    let mut registry = Registry::default();
    for (job, key) in [("billing", "billing:1"), ("billing", "billing:2"), ("mail", "mail:1")] {
        registry.insert(entry_of(job, key), later);
    }
    let pauses = [Target::job("billing"), Target::key("mail:2").unwrap()];
    let counts = registry.paused_per_job(&pauses);
    assert_eq!((counts["billing"], counts["mail"]), (2, 0));

    registry.wake_target(&Target::job("billing"), Instant::now());
    assert_eq!(proposed(&registry, Instant::now()), ["billing:1", "billing:2"]);
    registry.wake_target(&Target::key("mail:1").unwrap(), Instant::now());
    assert_eq!(
        proposed(&registry, Instant::now()),
        ["billing:1", "billing:2", "mail:1"]
    );
}

/// A start-up registry: a key added twice is refused, every key without an
/// answer stays due now, the others are filed where their rows say.
#[tokio::test(start_paused = true)]
async fn a_registry_being_built_files_every_key_in_one_pass() {
    use super::RegistryBuild;

    let clock = ServerClock::default();
    let now = Instant::now();
    let mut build = RegistryBuild::with_capacity(2);
    let (held, fresh) = (entry("held"), entry("fresh"));
    assert!(build.add(held.clone(), now));
    assert!(build.add(fresh.clone(), now));
    assert!(!build.add(entry("held"), now), "added twice");
    let reading = listening(now, &clock);
    build.file(&[fresh, held], |i| {
        (i == 1).then(|| reading.look_again(&held_elsewhere("held")))
    });
    let registry = build.finish();

    assert_eq!(registry.len(), 2);
    assert_eq!(proposed(&registry, now), ["fresh"], "no answer: look at once");
    assert_eq!(
        proposed(&registry, now + LEASE),
        ["fresh", "held"],
        "held: when its lease expires"
    );
}

/// Replacing a key's job (a stored key's new schedule) keeps its place in
/// the queue and its streaks.
#[test]
fn a_replaced_job_keeps_its_place_and_its_streaks() {
    use crate::runtime::run_end::Streak;

    let now = Instant::now();
    let mut registry = Registry::default();
    registry.insert(entry("k"), now + Duration::from_secs(9));
    assert_eq!(registry.update_failures("k", Streak::Extend), Some(1));
    let new = entry("k");
    assert!(registry.replace(new.clone()));
    assert!(!registry.replace(entry("other")), "not registered");
    assert!(registry.job("k").is_some_and(|j| std::sync::Arc::ptr_eq(&j, &new)));
    assert_eq!(registry.next_at(), Some(now + Duration::from_secs(9)));
    assert_eq!(registry.update_failures("k", Streak::Keep), Some(1));
    assert_eq!(registry.update_losses("k", Streak::Extend), Some((0, 1)));
    assert_eq!(registry.update_losses("k", Streak::Reset), Some((1, 0)));
    assert_eq!(registry.update_losses("gone", Streak::Extend), None);
}

/// A trigger or notification (`wake_first`) puts its key ahead of keys
/// that fell due earlier and still wait: the next claim proposes it even
/// when it can take only one key. A poll's wake-up (`wake`) keeps the
/// order of due times.
#[tokio::test(start_paused = true)]
async fn a_woken_key_is_proposed_before_the_backlog() {
    let t0 = Instant::now();
    let mut registry = Registry::default();
    for key in ["a", "b", "c"] {
        assert!(registry.insert(entry(key), t0));
    }
    assert!(registry.insert(entry("z"), t0 + Duration::from_secs(3600)));
    tokio::time::advance(Duration::from_secs(1)).await;
    let first = |registry: &Registry| -> Vec<String> {
        registry
            .due(Instant::now(), 1)
            .iter()
            .map(|j| j.key.to_string())
            .collect()
    };
    registry.wake("z", Instant::now());
    assert_eq!(
        first(&registry),
        ["a"],
        "a poll's wake-up: after the keys due before it"
    );
    registry.wait_until("z", t0 + Duration::from_secs(3600));
    registry.wake_first("z", Instant::now());
    assert_eq!(first(&registry), ["z"], "a trigger: first, ahead of the backlog");
    assert_eq!(proposed(&registry, Instant::now()), ["z", "a", "b", "c"]);
}

/// Under priorities, due keys go out by how long they have waited counting
/// their job's head start: `billing` (a head start of 10 s) before the
/// reports that fell due up to 10 s before it, but after one that has
/// waited longer than that — and within a job, oldest first.
#[tokio::test(start_paused = true)]
async fn a_head_start_orders_due_keys_and_waiting_longer_than_it_wins() {
    use std::sync::Arc;

    use crate::runtime::state::testing::entry_of;
    use crate::runtime::state::{Admit, Priorities};

    let t0 = Instant::now();
    let mut registry = Registry::default();
    for (job, key, secs) in [
        ("report", "report:old", 0),
        ("report", "report:1", 15),
        ("report", "report:2", 16),
        ("billing", "billing:1", 20),
        ("billing", "billing:2", 21),
    ] {
        registry.insert(entry_of(job, key), t0 + Duration::from_secs(secs));
    }
    tokio::time::advance(Duration::from_secs(22)).await;
    let priorities = Priorities::new([(Arc::from("billing"), 10)], Duration::from_secs(1));
    let order = |max: usize| -> Vec<String> {
        registry
            .due_by_priority(Instant::now(), max, &mut Admit::default(), &priorities)
            .iter()
            .map(|j| j.key.to_string())
            .collect()
    };
    assert_eq!(
        order(5),
        ["report:old", "billing:1", "billing:2", "report:1", "report:2"],
        "report:old waited 22 s, more than billing's 2 s + 10 s head start; the others 7 s and 6 s, less"
    );
    assert_eq!(order(2), ["report:old", "billing:1"], "at most max, best first");
    assert_eq!(
        registry
            .due_by_priority(Instant::now(), 5, &mut Admit::default(), &Priorities::default())
            .iter()
            .map(|j| j.key.to_string())
            .collect::<Vec<_>>(),
        ["report:old", "report:1", "report:2", "billing:1", "billing:2"],
        "no priorities: the queue's order"
    );
}
