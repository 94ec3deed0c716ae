//! A run's hold on a concurrency slot and on its key: taken when the run
//! starts; the slot given back when its body ends ([`RunSlot::releasing`])
//! or at the latest when the hold is dropped — whether the run was
//! released, its task panicked, or its future was dropped — like a
//! semaphore permit held by a response future; the key given back on drop.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::{JobEntry, Shared, WakeMark, lock};
use crate::metrics;
use crate::tenure::Tenure;

/// A run in progress here.
///
/// Guarantees, from [`RunSlot::take`] until it is dropped: its key is out
/// of the due queue. Until [`RunSlot::releasing`] (or the drop) the run
/// counts against `max_concurrent_runs` and its job name's limit, if it
/// has one; from then until the drop it counts as a release awaiting its
/// answer. Its tenure is renewed until [`RunSlot::releasing`] (or the
/// drop). On drop the slot is given back if
/// it was not already, the scheduler woken, the tenure's `ended` token
/// cancelled, and the key — unless [`RunSlot::requeue`] filed it already,
/// or it was removed meanwhile — is due again at once: the server decides
/// whether it is claimable, so a run lost to a panic costs one claim,
/// never a key stranded as running.
pub(crate) struct RunSlot {
    shared: Arc<Shared>,
    job: Arc<JobEntry>,
    tenure: Arc<Tenure>,
    requeued: bool,
    /// The body ended: the concurrency slot is back, the release is out.
    releasing: bool,
}

impl RunSlot {
    /// Takes a slot for the run of `tenure` (the key must already be marked
    /// running, `Registry::start`) and starts renewing its tenure.
    pub(crate) fn take(shared: Arc<Shared>, job: Arc<JobEntry>, tenure: Arc<Tenure>) -> Self {
        lock(&shared.held).insert(job.key.clone(), tenure.clone());
        metrics::held(&job.name, 1.0);
        shared.in_progress.fetch_add(1, Ordering::SeqCst);
        shared.limits.started(&job.name);
        metrics::runs_in_progress(1.0);
        RunSlot {
            shared,
            job,
            tenure,
            requeued: false,
            releasing: false,
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    pub(crate) fn job(&self) -> &Arc<JobEntry> {
        &self.job
    }

    pub(crate) fn tenure(&self) -> &Arc<Tenure> {
        &self.tenure
    }

    /// Stops renewing the tenure (before its release, so that a renewal
    /// never races the release). Idempotent.
    fn stop_renewing(&self) {
        let mut held = lock(&self.shared.held);
        // Only this run's entry: the key's next run may have one already.
        if held.get(&self.job.key).is_some_and(|t| Arc::ptr_eq(t, &self.tenure)) {
            held.remove(&self.job.key);
            drop(held);
            metrics::held(&self.job.name, -1.0);
        }
    }

    /// The body ended and its release is about to go out: stops renewing
    /// the tenure and gives the concurrency slot back now, so the scheduler
    /// can claim while the release is out; the key stays out of the due
    /// queue until the drop. Idempotent.
    pub(crate) fn releasing(&mut self) {
        self.stop_renewing();
        if !self.releasing {
            self.releasing = true;
            self.shared.releasing.fetch_add(1, Ordering::SeqCst);
            self.give_back_slot();
            self.shared.wake_scheduler();
        }
    }

    /// Gives back the run's concurrency slot (and its name's).
    fn give_back_slot(&self) {
        self.shared.in_progress.fetch_sub(1, Ordering::SeqCst);
        self.shared.limits.ended(&self.job.name);
        metrics::runs_in_progress(-1.0);
    }

    /// Puts the key back in the due queue at `at` (`Registry::finish`: no
    /// later than now if woken after `sent`), once the release answered.
    pub(crate) fn requeue(&mut self, at: Instant, sent: WakeMark) {
        self.shared.registry().finish(&self.job.key, at, sent, Instant::now());
        self.requeued = true;
    }
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        self.stop_renewing();
        if !self.requeued {
            // No answer to file: a mark taken now lets no wake-up through,
            // and "now" is early enough whatever the row says.
            let now = Instant::now();
            let mut registry = self.shared.registry();
            let sent = registry.mark();
            registry.finish(&self.job.key, now, sent, now);
        }
        if self.releasing {
            self.shared.releasing.fetch_sub(1, Ordering::SeqCst);
        } else {
            self.give_back_slot();
        }
        self.tenure.ended.cancel();
        self.shared.wake_scheduler();
    }
}

#[cfg(test)]
mod tests {
    //! A run's slot comes back however its task ends: a slot that leaked
    //! would leave `room()` short and the key stranded as running, so the
    //! next run of the key — or any run, at `max_concurrent_runs = 1` —
    //! would never start.

    use std::future::pending;
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::time::Instant;

    use super::RunSlot;
    use crate::runtime::state::testing::{entry, shared, tenure};
    use crate::runtime::state::{JobEntry, Registry, Shared};

    /// One key, registered and marked running, in a runtime allowing one run.
    fn one_run(key: &str) -> (Arc<Shared>, Arc<JobEntry>) {
        let job = entry(key);
        let mut registry = Registry::default();
        registry.insert(job.clone(), Instant::now());
        assert!(registry.start(&job));
        (shared(1, registry), job)
    }

    /// The slot is back: room for a run, nothing renewed, the key due now
    /// and its tenure's end signalled (what `Runtime::remove` waits for).
    fn assert_given_back(shared: &Shared, job: &Arc<JobEntry>, tenure_ended: bool) {
        assert_eq!(shared.running(), 0, "the concurrency slot was given back");
        assert_eq!(shared.room(), 1);
        assert!(shared.held().is_empty(), "the tenure is no longer renewed");
        let due: Vec<_> = shared.registry().due(Instant::now(), 8);
        assert!(
            due.iter().any(|j| Arc::ptr_eq(j, job)),
            "the key is back in the due queue"
        );
        assert!(tenure_ended, "the tenure's end was signalled");
    }

    #[tokio::test(start_paused = true)]
    async fn a_supervisor_that_panics_gives_its_slot_back() {
        let (shared, job) = one_run("k");
        let tenure = tenure(&shared, &job);
        let slot = RunSlot::take(shared.clone(), job.clone(), tenure.clone());
        assert_eq!((shared.running(), shared.room(), shared.held().len()), (1, 0, 1));

        let task = tokio::spawn(async move {
            let _slot = slot;
            panic!("a bug in the supervisor");
        });
        assert!(task.await.is_err_and(|e| e.is_panic()));

        assert_given_back(&shared, &job, tenure.ended.is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn a_supervisor_dropped_mid_run_gives_its_slot_back() {
        let (shared, job) = one_run("k");
        let tenure = tenure(&shared, &job);
        let slot = RunSlot::take(shared.clone(), job.clone(), tenure.clone());

        let task = tokio::spawn(async move {
            let _slot = slot;
            pending::<()>().await;
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(shared.running(), 1, "the slot is held while the run lasts");
        task.abort();
        assert!(task.await.is_err_and(|e| e.is_cancelled()));

        assert_given_back(&shared, &job, tenure.ended.is_cancelled());
    }

    /// The normal end: as the body ends, renewals stop and the concurrency
    /// slot is back while the key stays out of the queue; once the release
    /// answered, the key is filed where the release said — not moved to
    /// "now" by the drop.
    #[tokio::test(start_paused = true)]
    async fn a_run_that_ends_normally_keeps_the_time_it_was_filed_at() {
        let (shared, job) = one_run("k");
        let tenure = tenure(&shared, &job);
        let mut slot = RunSlot::take(shared.clone(), job.clone(), tenure.clone());

        slot.releasing();
        slot.releasing();
        assert!(shared.held().is_empty(), "no renewal races the release");
        assert_eq!(shared.running(), 0, "the body is over: its slot is back");
        assert_eq!(shared.room(), 1, "a claim may go out while the release is");
        assert!(
            shared.registry().due(Instant::now(), 8).is_empty(),
            "the key waits for its release"
        );
        assert!(
            !tenure.ended.is_cancelled(),
            "the tenure is not over before its release"
        );
        let hour = Instant::now() + Duration::from_secs(3600);
        let sent = shared.registry().mark();
        slot.requeue(hour, sent);
        drop(slot);

        assert_eq!(shared.room(), 1);
        assert_eq!(shared.running(), 0, "given back once, not twice");
        assert_eq!(shared.registry().next_at(), Some(hour));
        assert!(tenure.ended.is_cancelled());
    }

    /// Releases that are slow to answer hold claims back once they number
    /// more than `max_concurrent_runs`: a replica holds at most twice its
    /// limit in leases claimed and not released.
    #[tokio::test(start_paused = true)]
    async fn releases_awaiting_answers_beyond_the_limit_leave_no_room() {
        let jobs: Vec<_> = (0..3).map(|i| entry(&format!("k{i}"))).collect();
        let mut registry = Registry::default();
        for job in &jobs {
            registry.insert(job.clone(), Instant::now());
            assert!(registry.start(job));
        }
        let shared = shared(1, registry);
        let mut slots: Vec<RunSlot> = jobs
            .iter()
            .map(|job| RunSlot::take(shared.clone(), job.clone(), tenure(&shared, job)))
            .collect();
        assert_eq!(shared.room(), 0, "three runs in progress, a limit of one");

        slots[0].releasing();
        slots[1].releasing();
        assert_eq!(shared.running(), 1);
        assert_eq!(shared.room(), 0, "one body running fills the limit");
        slots[2].releasing();
        assert_eq!(shared.running(), 0);
        assert_eq!(shared.room(), 0, "three releases out: two beyond the limit of one");
        slots.pop();
        assert_eq!(shared.room(), 0, "two releases out: one beyond the limit");
        slots.pop();
        assert_eq!(shared.room(), 1, "one release out: room for a run");
        slots.pop();
        assert_eq!(shared.room(), 1);
    }
}
