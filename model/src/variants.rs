//! The faulty-protocol switches: each one puts back a mistake the real
//! protocol avoids, so a test can assert that the checker finds the
//! violation it causes — evidence that the model is able to fail.
//!
//! They mirror entries of `scripts/clause-removal.py` (which removes the
//! same clauses from the real SQL and runs scenario tests against
//! PostgreSQL); here the checker explores every interleaving instead of a
//! scenario.

/// Which protocol the model runs: the real one, or one with a mistake.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The protocol as `src/lease/` and `src/runtime/` implement it.
    #[default]
    Correct,
    /// The deadline margin does not cover the clock-rate error: the model
    /// is run with a margin below `2ρ × lease` (set by the config; this
    /// variant only labels it, the protocol's code paths are the real
    /// ones). docs/design.md §5, step 5.
    MarginBelowDrift,
    /// `RENEW_MANY`'s `mine` without `l.holder = $1 AND l.fence = t.fence`
    /// (clause-removal entries "renew: holder clause removed" and "renew:
    /// fence clause removed" together): a renewal extends whatever live
    /// tenure the key has. The runtime's second line of defence still
    /// holds: the heartbeat and `FenceGuard::ensure` read only the row of
    /// their own `(key, fence)`, and `Tenure::renewed` ignores any other.
    RenewWithoutHolderFence,
    /// [`Variant::RenewWithoutHolderFence`], and the answer trusted as
    /// an `ensure` that took `renewed.pop()`, whatever row came back, into
    /// a `Tenure::renewed` that did not compare fences: the holder and fence check removed from renewal
    /// altogether.
    RenewUncheckedAnswer,
    /// `CLAIM_DUE`'s `pick` (and `claim_run`'s `DO UPDATE … WHERE`) with the
    /// same-holder re-entrance `(l.holder = $1 OR l.expires_at <= now)`
    /// (clause-removal entries "claim_run/claim_due: same-holder re-entrance
    /// added"): a second process with the same holder id takes a live lease.
    ReentrantRunClaim,
    /// The scheduler starts a run from a claim's answer without checking
    /// that the tenure's local deadline is still ahead (the gap this model
    /// found): `supervise::spawn` spawns the
    /// job's task, and only then does the supervisor see the deadline
    /// passed. `CLAIM_TIMEOUT` (10 s) is not bounded by the lease.
    LateClaimStarts,
    /// The trap of a lease table released by `DELETE` (docs/design.md §8):
    /// a release `DELETE`s the row, and a claim takes
    /// its fence from the row (`fence + 1`, or 1 with no row) instead of
    /// `nextval('leasehold_fence_seq')` (clause-removal entry
    /// "claim/claim_run: fence from `fence + 1` instead of the sequence",
    /// with the release deleting the row): fences restart.
    ///
    /// Checked without F5's rules (as [`Variant::UnboundedFencedTransaction`]):
    /// the trap is the fence alone, and F5's checks, which name the tenure
    /// by its fence, are fooled by a repeated one too — only later in the
    /// trace, at 1.6 times the states (the CI time).
    DeleteOnRelease,
    /// Fenced writes not bounded by their tenure, as before schema version
    /// 5 (docs/design.md §4, F5): no commit check on `leasehold_fence` (R1),
    /// no `idle_in_transaction_session_timeout` set by the advance (R2), no
    /// early refusal of an advance or a fenced `UPDATE` whose tenure has
    /// ended. A process frozen inside its transaction commits after its
    /// lease expired, and holds the fence row's lock — blocking its
    /// successor's advance — for as long as it stays frozen.
    UnboundedFencedTransaction,
    /// The advance sets the idle timeout (R2), the advance and the fenced
    /// `UPDATE` refuse to start once the tenure has ended, but nothing
    /// checks the tenure at `COMMIT` (R1 removed: clause-removal entries
    /// "commit check: …"): a process frozen between its advance and its
    /// commit, and resumed after its lease expired but before the server's
    /// idle timeout, still commits.
    NoCommitCheck,
    /// The commit check (R1) and the early refusals, without the idle
    /// timeout (R2 removed: clause-removal entry "fence advance: idle bound
    /// not set"): no late commit lands, but a process frozen inside its
    /// transaction blocks its successor's advance for as long as it stays
    /// frozen.
    NoIdleTimeout,
    /// Crash takeover (issue 40) without the session test: a confirmation
    /// stamps `gone_seen_at` on a registration whether or not its session
    /// still holds its advisory lock (`pg_try_advisory_xact_lock(<ns>,
    /// pid)` removed from the sighting), so it is dead a grace after it
    /// registered. A frozen or partitioned holder, whose session the server
    /// keeps, is taken over after the grace while its run goes on.
    NoSessionDeadTest,
    /// Crash takeover without the grace: `pick` counts a registration dead
    /// as soon as its session is seen gone (`gone_seen_at + grace <= now`
    /// removed). A holder whose session was killed (pg_terminate_backend,
    /// a pooler, a TCP reset) is taken over before it can notice.
    NoGrace,
    /// Crash takeover without the holder's stop deadline on a lost
    /// session: a run whose row was not re-pointed to a new registration
    /// goes on (until its lease's own deadline) after `last successful
    /// confirm's send instant + grace − margin`.
    NoSessionStop,
    /// A claim names the runtime's registration as `owner` however long
    /// ago its last successful confirm was. A process resumed from a
    /// freeze during which its session was killed claims a key naming a
    /// registration already dead (silent for longer than the grace, its
    /// lock free): another runtime takes the key over at once, before the
    /// resumed one's next confirm reads the error. The real rule (the
    /// model's, proposed for the code): `owner` NULL unless the last
    /// successful confirm is less than `grace − margin` old.
    ClaimNamesStaleRegistration,
    /// Fleet-wide limit (issue 44) without the guard: `CLAIM_DUE` takes a
    /// due key of a limited kind without taking a slot row of its kind
    /// (the slot CTE removed, or a `count(*) < N` that the model's atomic
    /// statements would make look exact — see `model/fleet-limit.md`).
    NoKindSlot,
    /// A slot's freeness read from the lease row through a subquery —
    /// `NOT EXISTS (SELECT 1 FROM leasehold_lease l WHERE l.key = s.key
    /// AND l.fence = s.fence AND l.expires_at > now AND NOT dead(l.owner))`
    /// — instead of the slot row's own `expires_at` and `owner`. The slot
    /// row is locked and re-read at its latest version, but the subquery
    /// reads the statement's snapshot: a claim concurrent with the one
    /// that just took the slot sees the key's older tenure (its older
    /// fence, expired) and takes the slot again. The model's statements
    /// are atomic, so the stale snapshot is put in by hand: the claim's
    /// subquery reads the lease rows as the first claim at the same server
    /// instant found them ([`crate::db::Db::snapshot`]).
    SlotFreeFromLeaseRow,
    /// Not a mistake, the control of [`Variant::SlotFreeFromLeaseRow`]:
    /// the same predicate on the lease rows' latest versions (as if the
    /// statement also locked them). It holds: the counterexample of the
    /// other variant is the snapshot's, not the predicate's.
    SlotFreeFromLatestLeaseRow,
    /// `RENEW_MANY` extends the lease row but not its slot row: the slot
    /// expires at claim + lease while its run goes on renewed.
    SlotNotRenewed,
    /// `FINISH_MANY` releases the lease row but not its slot row: the slot
    /// stays taken until the tenure's `expires_at` passes.
    SlotNotReleased,
    /// A slot row is free only once its `expires_at` passes: no dead-owner
    /// rule on the slot (the lease row keeps it). A dead holder's key
    /// waits for the slot's expiry instead of being taken over after the
    /// grace.
    NoSlotTakeover,
    /// The re-point (after a runtime registers again) moves the lease
    /// row's `owner` but not its slot row's: the slot still names the lost
    /// registration, dead a grace later, and is taken while its run goes
    /// on legitimately.
    SlotNotRepointed,
}

impl Variant {
    /// A registration is seen gone only once its session is gone (its
    /// advisory lock free).
    pub fn session_test(self) -> bool {
        self != Variant::NoSessionDeadTest
    }

    /// The claimer's dead test asks that `gone_seen_at + grace <= now`.
    pub fn grace_test(self) -> bool {
        self != Variant::NoGrace
    }

    /// A holder that saw its session end stops the runs it could not
    /// re-point at `last successful confirm's send instant + grace −
    /// margin`.
    pub fn session_stop(self) -> bool {
        self != Variant::NoSessionStop
    }

    /// R1: `COMMIT` of a fenced transaction is refused unless its tenure is
    /// live on the server clock (the deferred constraint trigger on
    /// `leasehold_fence`).
    pub fn commit_check(self) -> bool {
        !matches!(
            self,
            Variant::UnboundedFencedTransaction | Variant::NoCommitCheck | Variant::DeleteOnRelease
        )
    }

    /// R2: the advance sets `idle_in_transaction_session_timeout` to the
    /// lease for its transaction, so the server ends a transaction whose
    /// client has been silent for a lease.
    pub fn idle_timeout(self) -> bool {
        !matches!(
            self,
            Variant::UnboundedFencedTransaction | Variant::NoIdleTimeout | Variant::DeleteOnRelease
        )
    }

    /// The advance (`live` in `ADVANCE_FENCE`) and the fenced `UPDATE`
    /// (`EXISTS (… live …)`) refuse to start once their tenure has ended:
    /// `LeaseLost`, the run cancelled. For the advance an early error; R1
    /// is what makes the commit safe.
    pub fn early_check(self) -> bool {
        !matches!(self, Variant::UnboundedFencedTransaction | Variant::DeleteOnRelease)
    }
}
