//! The database: lease rows, the fence sequence, the fence table, one user
//! table row with a `last_fence` column per key, the liveness
//! registrations, the slot rows of a fleet-wide limit (issue 44, proposed:
//! `model/fleet-limit.md`), and the server clock.
//!
//! Every statement is one atomic transition, as PostgreSQL runs it: each
//! lease statement is its own implicit transaction (invariant 2, C1), and
//! its `WHERE` is evaluated on the latest row version after the row lock
//! (invariant 3), so a statement sees the effects of every statement that
//! committed before it. Times are server-clock units ([`Db::clock`]):
//! `clock_timestamp()` is the clock at the instant the transition runs
//! (invariant 1: nothing else is compared).
//!
//! Each method names the SQL it stands for (`src/lease/…`, constant and
//! clause) and the Rust function that sends it.

use crate::clock::Rate;
use crate::variants::Variant;

/// No holder: the placeholder of a row registered but never claimed.
pub const NO_HOLDER: u8 = u8::MAX;

/// One row of `leasehold_lease` (migrations/, docs/design.md §3).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Row {
    /// `holder`: current or last holder id.
    pub holder: u8,
    /// `fence`.
    pub fence: u8,
    /// `acquired_at` (server units).
    pub acquired: u16,
    /// `expires_at` (server units). Only this decides whether the lease is
    /// held: held iff `expires > clock`.
    pub expires: u16,
    /// `next_due_at` (server units): the slot the key owes (`slot_at` is the
    /// same value in the model: no retry backoff is modelled).
    pub next_due: u16,
    /// `owner`: the registration id (`leasehold_replica.id`) of the
    /// runtime that claimed it, `None` (NULL) when it had none. A row whose
    /// owner is dead ([`Db::reg_dead`]) can be claimed before it expires.
    pub owner: Option<u8>,
    /// Ghost: the run number of the tenure this row records (0: none yet).
    pub run: u8,
}

/// One row of the UNLOGGED `leasehold_replica` table and the liveness
/// session behind it (a runtime's listener connection, which holds the
/// session-level advisory lock `(<ns>, pid)` for as long as it lives).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reg {
    /// The replica whose session it is (ghost: the table has `pid` and
    /// `holder`).
    pub replica: u8,
    /// The session lives on the server (and holds its advisory lock). It
    /// ends with a crash (the kernel closes the socket, unless the close
    /// is lost in a partition), or a kill while the process lives
    /// (`pg_terminate_backend`, a pooler, a TCP reset); not while the
    /// process is frozen or cut off.
    pub alive: bool,
    /// `registered_at` (server units). Every registration here is after
    /// the server's start: the model has no server restart, so test (b)
    /// always passes.
    pub registered: u16,
    /// `confirmed_at` (server units).
    pub confirmed: u16,
    /// `gone_seen_at` (server units): when a confirmation first saw the
    /// session gone. Set when the session ends, the earliest any
    /// confirmation could see it (a real one sees it up to a confirm
    /// interval later, which only delays takeovers). Without the sighting's
    /// lock test ([`Variant::NoSessionDeadTest`]) it is set at
    /// registration: the first confirmation of another replica would stamp
    /// a live session.
    pub gone_seen: Option<u16>,
}

/// One row of the proposed `leasehold_kind_slot(kind, slot_no, key, fence,
/// owner, expires_at)` table (issue 44, `model/fleet-limit.md`): a kind
/// with a fleet-wide limit N has N slot rows, and a tenure of one of its
/// keys holds one of them from its claim to its end. The model has one
/// kind (every key), so a slot is named by its index (`slot_no − 1`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Slot {
    /// `key`: the key of the tenure that took it last (`None`: never
    /// taken).
    pub key: Option<u8>,
    /// `fence`: that tenure's fence.
    pub fence: u8,
    /// `owner`: the registration its claim named (the lease row's
    /// `owner`, moved with it by the re-point).
    pub owner: Option<u8>,
    /// `expires_at` (server units): always the lease row's `expires_at`
    /// of the same tenure (written by the same statements).
    pub expires: u16,
}

/// One row of `leasehold_fence` (a fenced resource). An absent row is
/// `last = 0` (the advance inserts it).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct FenceRow {
    /// `last_fence`.
    pub last: u8,
    /// The open fenced transaction holding the row lock (F3).
    pub lock: Option<Lock>,
}

/// An open fenced transaction, as the server sees it: it holds the fence
/// row's lock until it commits, rolls back, or the server ends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lock {
    /// The replica whose connection it is.
    pub replica: u8,
    /// The fence its advance wrote: the tenure it belongs to. With the
    /// replica it names the transaction (a replica's stopped run may leave
    /// one behind on a connection cut by a partition).
    pub fence: u8,
    /// `last_fence` before the advance (restored by a rollback).
    pub prev: u8,
    /// Server clock when its last statement (the advance) finished: where
    /// `idle_in_transaction_session_timeout` counts from (R2). `None` once
    /// the timeout could no longer fall within the checked horizon — a
    /// state reduction (`LeaseModel::forget_idle_times`): nothing depends
    /// on the value then, and equal states merge.
    pub idle_since: Option<u16>,
}

/// What a `COMMIT` of a fenced transaction found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Commit {
    /// Its writes landed, the lock is released.
    Committed,
    /// R1: its tenure was no longer live on the server clock; the server
    /// rolled it back.
    Refused,
    /// The transaction no longer exists: the server ended it (R2). The
    /// client reads an error (a terminated connection).
    Gone,
}

/// The database's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Db {
    /// `clock_timestamp()`, in server units.
    pub clock: u16,
    /// The server clock's rate (within ρ of real time).
    pub rate: Rate,
    /// The last value of `leasehold_fence_seq`.
    pub seq: u8,
    /// `leasehold_lease`, one row per key (`None`: no row).
    pub rows: Vec<Option<Row>>,
    /// `leasehold_fence`: the resource named after each key.
    pub fence_rows: Vec<FenceRow>,
    /// One user-table row per key, written with fenced `UPDATE`s: its
    /// `last_fence` column.
    pub column: Vec<u8>,
    /// `leasehold_replica`: registration `id` is the index + 1 (ids come
    /// from a sequence; rows are never deleted here).
    pub regs: Vec<Reg>,
    /// `leasehold_kind_slot`: the limited kind's N slot rows (empty: no
    /// limit, `Config::limit` `None`).
    pub slots: Vec<Slot>,
    /// Only with [`Variant::SlotFreeFromLeaseRow`]: the lease rows as the
    /// first claim at this server instant found them — the snapshot of a
    /// claim concurrent with every other claim of the instant (statements
    /// at one server instant may overlap; a later one's snapshot may
    /// predate an earlier one's commit). Cleared at each tick.
    pub snapshot: Option<Vec<Option<Row>>>,
}

/// A tenure a claim acquired.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Claimed {
    /// The key.
    pub key: u8,
    /// Its fresh fence.
    pub fence: u8,
    /// `remaining = expires_at - clock_timestamp()` after the write.
    pub remaining: u16,
    /// The next slot after `acquired_at` (what a successful run's release
    /// records, `next_after_success` in `src/schedule/`).
    pub next_slot: u16,
    /// The slot it runs for: the row's `next_due_at` (`slot_at`) when
    /// claimed.
    pub slot: u16,
    /// Ghost: the run number.
    pub run: u8,
    /// Ghost: the row was taken before it expired, its owner dead.
    pub took_over: bool,
    /// Ghost: the slot row it took had not expired: its owner was dead.
    pub slot_took_over: bool,
}

/// A row a renewal extended, as `RENEW_MANY` returns it (`r.*`: the row's
/// own fence, which is the caller's unless a guard is missing).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Renewed {
    /// The key.
    pub key: u8,
    /// The row's fence.
    pub fence: u8,
    /// Time left, measured by the server after the write.
    pub remaining: u16,
}

/// What a fenced write found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fenced {
    /// The write went through.
    Accepted,
    /// `StaleFence`: a newer run already wrote.
    Rejected,
    /// The fence row is locked by another open transaction: the statement
    /// waits (F3); no transition.
    Waits,
}

impl Db {
    /// Rows registered by `register_many` (`src/lease/batch/register.rs`,
    /// `REGISTER_MANY`): free (`expires_at = acquired_at + 1 µs`), due at
    /// 0, each with a fence from the sequence.
    pub fn new(keys: usize, rate: Rate, regs: Vec<Reg>, limit: Option<u8>) -> Db {
        Db {
            clock: 0,
            rate,
            seq: keys as u8,
            rows: (0..keys)
                .map(|k| {
                    Some(Row {
                        holder: NO_HOLDER,
                        fence: k as u8 + 1,
                        acquired: 0,
                        expires: 1,
                        next_due: 0,
                        owner: None,
                        run: 0,
                    })
                })
                .collect(),
            fence_rows: vec![FenceRow::default(); keys],
            column: vec![0; keys],
            regs,
            slots: vec![Slot::default(); limit.map_or(0, usize::from)],
            snapshot: None,
        }
    }

    /// Whether registration `id` is dead, as `pick`, the confirm's report
    /// and the re-point test it (`dead_owner!`): seen gone a grace ago
    /// (`gone_seen_at + grace <= now`). The sighting tests (b)
    /// `registered_at > pg_postmaster_start_time()` (always true here: no
    /// server restart is modelled) and (c) the session's advisory lock: see
    /// [`Reg::gone_seen`]. A missing registration (NULL owner) is not dead:
    /// the row falls back to expiry. [`Variant::NoGrace`] drops the grace
    /// (dead once seen gone).
    pub fn reg_dead(&self, id: Option<u8>, grace: u16, variant: Variant) -> bool {
        let Some(seen) = id
            .and_then(|id| self.regs.get(id as usize - 1))
            .and_then(|reg| reg.gone_seen)
        else {
            return false;
        };
        !variant.grace_test() || seen + grace <= self.clock
    }

    /// A runtime registers (after it listens, or after its session ended):
    /// a new session takes the advisory lock and inserts its row,
    /// `registered_at = confirmed_at = now`. Returns the new id.
    pub fn register(&mut self, replica: u8, variant: Variant) -> u8 {
        self.regs.push(Reg {
            replica,
            alive: true,
            registered: self.clock,
            confirmed: self.clock,
            gone_seen: (!variant.session_test()).then_some(self.clock),
        });
        self.regs.len() as u8
    }

    /// The confirm on registration `id`'s session: `confirmed_at =
    /// clock_timestamp()`. `false` when the session is gone: the runtime
    /// reads an error (its connection was closed).
    pub fn confirm(&mut self, id: u8) -> bool {
        let now = self.clock;
        match self.regs.get_mut(id as usize - 1) {
            Some(reg) if reg.alive => {
                reg.confirmed = now;
                true
            }
            _ => false,
        }
    }

    /// The session of registration `id` ends on the server.
    pub fn end_session(&mut self, id: u8) {
        let now = self.clock;
        if let Some(reg) = self.regs.get_mut(id as usize - 1) {
            reg.alive = false;
            reg.gone_seen.get_or_insert(now);
        }
    }

    /// Re-point: `UPDATE leasehold_lease SET owner = $new WHERE key = $key
    /// AND owner = $old AND NOT dead($old)` — guarded so that it cannot
    /// undo a takeover (the row's fence changed with its owner) nor revive
    /// a registration a claimer may already count dead; the row lock orders
    /// it against a claimer's `pick`. With a fleet-wide limit the same
    /// statement moves the tenure's slot row (`key`, `fence`, `owner =
    /// old`) too (not with [`Variant::SlotNotRepointed`]). Returns whether
    /// the row was re-pointed.
    pub fn repoint(&mut self, key: u8, fence: u8, old: u8, new: u8, grace: u16, variant: Variant) -> bool {
        let dead = self.reg_dead(Some(old), grace, variant);
        match self.rows[key as usize].as_mut() {
            Some(row) if row.fence == fence && row.owner == Some(old) && !dead => {
                row.owner = Some(new);
                if variant != Variant::SlotNotRepointed {
                    let own = (Some(key), fence, Some(old));
                    for slot in self.slots.iter_mut().filter(|s| (s.key, s.fence, s.owner) == own) {
                        slot.owner = Some(new);
                    }
                }
                true
            }
            _ => false,
        }
    }

    /// Whether the key's lease is held by the server clock.
    pub fn held(&self, key: usize) -> bool {
        self.rows[key].as_ref().is_some_and(|r| r.expires > self.clock)
    }

    /// Whether a scheduled claim could take the key now: free (or its
    /// owner dead, with `liveness`) and due — and, with a fleet-wide
    /// `limit`, fewer than `limit` tenures of the kind live
    /// ([`Db::live_tenures`]: by the lease rows, not the slot table, so a
    /// slot kept busy by mistake shows as a due key that waits).
    pub fn claimable(&self, key: usize, liveness: Option<(u16, Variant)>, limit: Option<u8>) -> bool {
        if limit.is_some_and(|n| self.live_tenures(liveness) >= n as usize) {
            return false;
        }
        match &self.rows[key] {
            Some(r) => {
                let dead = liveness.is_some_and(|(grace, v)| self.reg_dead(r.owner, grace, v));
                (r.expires <= self.clock || dead) && r.next_due <= self.clock
            }
            None => true,
        }
    }

    /// Live tenures of the (one) kind by the server's lease rows: a row
    /// with a holder, `expires_at > now`, and (with `liveness`) an owner
    /// not dead — a dead owner's tenure is over for the protocol (its key
    /// may be taken over, issue 40; its holder has stopped, or is frozen
    /// and excused as §2 excuses it), though its `expires_at` is ahead.
    pub fn live_tenures(&self, liveness: Option<(u16, Variant)>) -> usize {
        self.rows
            .iter()
            .flatten()
            .filter(|r| {
                r.holder != NO_HOLDER
                    && r.expires > self.clock
                    && !liveness.is_some_and(|(grace, v)| self.reg_dead(r.owner, grace, v))
            })
            .count()
    }

    /// Whether slot `i` may be taken by a claim now. The real rule: the
    /// slot row's own `expires_at <= now` (re-checked on its latest
    /// version after its row lock, as PostgreSQL's EvalPlanQual does for
    /// the locked row's own columns) or its `owner` dead by the lease
    /// row's rule. The variants: [`Variant::NoSlotTakeover`] (expiry
    /// only); [`Variant::SlotFreeFromLeaseRow`] (no live lease row of the
    /// slot's `(key, fence)` in the statement's snapshot, `stale`; the
    /// latest rows with [`Variant::SlotFreeFromLatestLeaseRow`]).
    fn slot_free(&self, i: usize, grace: Option<u16>, variant: Variant, stale: &[Option<Row>]) -> bool {
        let slot = &self.slots[i];
        let dead = |owner| grace.is_some_and(|g| self.reg_dead(owner, g, variant));
        match variant {
            Variant::NoSlotTakeover => slot.expires <= self.clock,
            Variant::SlotFreeFromLeaseRow | Variant::SlotFreeFromLatestLeaseRow => slot.key.is_none_or(|k| {
                !stale[k as usize]
                    .as_ref()
                    .is_some_and(|r| r.fence == slot.fence && r.expires > self.clock && !dead(r.owner))
            }),
            _ => slot.expires <= self.clock || dead(slot.owner),
        }
    }

    /// The scheduler's batch claim for new runs: `LeaseStore::claim_due`,
    /// `CLAIM_DUE` in `src/lease/batch/claim_due.rs` (the same guards as
    /// `LeaseStore::claim_run`'s `CLAIM_RUN` in `src/lease/claim.rs`).
    ///
    /// - `pick`: `l.expires_at <= clock_timestamp()` (free, whoever held it,
    ///   this holder id included: invariant 3, no re-entrance) `AND
    ///   (l.next_due_at IS NULL OR l.next_due_at <= clock_timestamp())`
    ///   (due); with [`Variant::ReentrantRunClaim`], `(l.holder = $1 OR
    ///   l.expires_at <= …)`.
    /// - `claimed`: `fence = nextval('leasehold_fence_seq')` (invariants 4,
    ///   5), `acquired_at = clock_timestamp()`, `expires_at =
    ///   clock_timestamp() + lease`; `remaining` measured after the write.
    ///   With [`Variant::DeleteOnRelease`] the fence is the row's `fence +
    ///   1`, or 1 when the row is gone (and a missing row is inserted, as
    ///   `CLAIM_RUN`'s insert path does).
    ///
    /// - crash takeover (issue 40, with `liveness`): `pick` also takes a
    ///   due row whose `owner` registration is dead ([`Db::reg_dead`]);
    ///   `claimed` writes `owner = $owner`, the claimer's registration id
    ///   (NULL when it has none). The taken-over run's `lost` history row
    ///   is not modelled.
    ///
    /// - fleet-wide limit (issue 44, with slot rows): a key it would take
    ///   also takes a free slot row (`Db::slot_free`; `FOR UPDATE SKIP
    ///   LOCKED` on `leasehold_kind_slot`), the first free one, writing
    ///   `key`, `fence`, `owner` and the lease row's `expires_at`; a key
    ///   with no free slot is not taken (stays due). Keys are taken in
    ///   order (the real order: oldest due first).
    ///   [`Variant::NoKindSlot`] ignores the slots.
    ///
    /// Returns the tenures, and whether a key free and due was left for
    /// want of a slot (ghost).
    ///
    /// `FOR UPDATE SKIP LOCKED` on the lease rows, `LIMIT` and the pause
    /// clauses are not modelled (no lease-row locks, no per-replica
    /// concurrency limit, no pauses).
    #[allow(clippy::too_many_arguments)]
    pub fn claim_due(
        &mut self,
        holder: u8,
        owner: Option<u8>,
        keys: &[u8],
        lease: u16,
        period: u16,
        liveness: Option<u16>,
        variant: Variant,
    ) -> (Vec<Claimed>, bool) {
        let now = self.clock;
        let mut out = Vec::new();
        let mut slot_wait = false;
        let mut taken = Vec::new();
        let limited = !self.slots.is_empty() && variant != Variant::NoKindSlot;
        if variant == Variant::SlotFreeFromLeaseRow && self.snapshot.is_none() {
            self.snapshot = Some(self.rows.clone());
        }
        for &k in keys {
            let row = &self.rows[k as usize];
            let expired = row.as_ref().is_none_or(|r| r.expires <= now);
            let dead =
                liveness.is_some_and(|grace| row.as_ref().is_some_and(|r| self.reg_dead(r.owner, grace, variant)));
            let free = expired || dead;
            let due = row.as_ref().is_none_or(|r| r.next_due <= now);
            let mine = row.as_ref().is_some_and(|r| r.holder == holder);
            let take = match variant {
                Variant::ReentrantRunClaim => (free || mine) && due,
                _ => free && due,
            };
            if !take {
                continue;
            }
            let slot = if limited {
                let stale = match variant {
                    Variant::SlotFreeFromLeaseRow => self.snapshot.as_deref().unwrap_or(&[]),
                    _ => &self.rows,
                };
                // One statement's slot CTE returns each slot row once:
                // a slot it took for an earlier key is not free for a later
                // one, whatever its snapshot says.
                let free = |i: &usize| !taken.contains(i) && self.slot_free(*i, liveness, variant, stale);
                match (0..self.slots.len()).find(free) {
                    Some(i) => Some(i),
                    None => {
                        slot_wait = true;
                        continue;
                    }
                }
            } else {
                None
            };
            let fence = match variant {
                Variant::DeleteOnRelease => row.as_ref().map_or(1, |r| r.fence.saturating_add(1)),
                _ => {
                    self.seq += 1;
                    self.seq
                }
            };
            let next_due = row.as_ref().map_or(0, |r| r.next_due);
            let mut slot_took_over = false;
            if let Some(i) = slot {
                taken.push(i);
                slot_took_over = self.slots[i].expires > now;
                self.slots[i] = Slot {
                    key: Some(k),
                    fence,
                    owner,
                    expires: now + lease,
                };
            }
            self.rows[k as usize] = Some(Row {
                holder,
                fence,
                acquired: now,
                expires: now + lease,
                next_due,
                owner,
                run: 0, // set by the caller (ghost run number)
            });
            out.push(Claimed {
                key: k,
                fence,
                remaining: lease,
                next_slot: (now / period + 1) * period,
                slot: next_due,
                run: 0,
                took_over: !expired,
                slot_took_over,
            });
        }
        (out, slot_wait)
    }

    /// The heartbeat and `FenceGuard::ensure`: `LeaseStore::renew_each`
    /// (`renew_many`), `RENEW_MANY` in `src/lease/renew.rs`.
    ///
    /// - `mine`: `l.holder = $1 AND l.fence = t.fence AND l.expires_at >
    ///   clock_timestamp()` (invariant 6); with
    ///   [`Variant::RenewWithoutHolderFence`] (and
    ///   [`Variant::RenewUncheckedAnswer`]) only the expiry clause.
    /// - `renewed`: `expires_at = clock_timestamp() + lease`, expiry checked
    ///   again; returns `r.*` — the row's own fence — and `remaining`.
    ///
    /// - fleet-wide limit: the slot row of each renewed `(key, fence)` gets
    ///   the same `expires_at` (not with [`Variant::SlotNotRenewed`]).
    ///
    /// `SKIP LOCKED`/`busy` and the pause report (`stop`) are not modelled.
    pub fn renew_many(&mut self, holder: u8, tenures: &[(u8, u8)], lease: u16, variant: Variant) -> Vec<Renewed> {
        let now = self.clock;
        let mut out = Vec::new();
        for &(k, fence) in tenures {
            let Some(row) = self.rows[k as usize].as_mut() else {
                continue;
            };
            let mine = match variant {
                Variant::RenewWithoutHolderFence | Variant::RenewUncheckedAnswer => row.expires > now,
                _ => row.holder == holder && row.fence == fence && row.expires > now,
            };
            if mine {
                row.expires = now + lease;
                let own = (Some(k), row.fence);
                if variant != Variant::SlotNotRenewed {
                    for slot in self.slots.iter_mut().filter(|s| (s.key, s.fence) == own) {
                        slot.expires = now + lease;
                    }
                }
                out.push(Renewed {
                    key: k,
                    fence: row.fence,
                    remaining: lease,
                });
            }
        }
        out
    }

    /// A run's release: `LeaseStore::finish_many`, `FINISH_MANY` in
    /// `src/lease/batch/finish.rs` (sent by `src/runtime/finish.rs`; a plain
    /// `LeaseStore::release` is the same statement).
    ///
    /// - `mine`: `l.holder = t.holder AND l.fence = t.fence` (invariant 7):
    ///   a late release of an older tenure changes nothing.
    /// - `released`: `expires_at = GREATEST(clock_timestamp(), l.acquired_at
    ///   + 1 µs)`, `next_due_at = COALESCE(t.at, …, l.next_due_at)`: a
    ///   successful run records its next slot, a cancelled one leaves the
    ///   slot owed (`NextDue::Unchanged`).
    ///
    /// - fleet-wide limit: the slot row of `(key, fence)` gets the same
    ///   `expires_at` (not with [`Variant::SlotNotReleased`]).
    ///
    /// With [`Variant::DeleteOnRelease`], the row is deleted instead.
    /// Returns whether the tenure was the current one.
    pub fn finish(&mut self, key: u8, holder: u8, fence: u8, next: Option<u16>, variant: Variant) -> bool {
        let now = self.clock;
        let slot = &mut self.rows[key as usize];
        let Some(row) = slot.as_mut() else {
            return false;
        };
        if row.holder != holder || row.fence != fence {
            return false;
        }
        if variant == Variant::DeleteOnRelease {
            *slot = None;
            return true;
        }
        row.expires = now.max(row.acquired + 1);
        let end = row.expires;
        if let Some(at) = next {
            row.next_due = at;
        }
        if variant != Variant::SlotNotReleased {
            for slot in self.slots.iter_mut().filter(|s| (s.key, s.fence) == (Some(key), fence)) {
                slot.expires = end;
            }
        }
        true
    }

    /// Whether the tenure `(key, fence)` is live on the server clock: the
    /// key's lease row still carries that fence and `expires_at >
    /// clock_timestamp()`. What the commit check (R1) and the advance's
    /// early refusal ask.
    pub fn tenure_live(&self, key: u8, fence: u8) -> bool {
        self.rows[key as usize]
            .as_ref()
            .is_some_and(|r| r.fence == fence && r.expires > self.clock)
    }

    /// The fence row's committed `last_fence` (what another session
    /// reads: not an open transaction's advance).
    pub fn committed_fence(&self, key: u8) -> u8 {
        let row = &self.fence_rows[key as usize];
        row.lock.map_or(row.last, |l| l.prev)
    }

    /// Whether the fence row of `key` is locked by a transaction other
    /// than `(replica, fence)`'s: an advance of that run waits (F3).
    pub fn locked_by_other(&self, key: u8, replica: u8, fence: u8) -> bool {
        self.fence_rows[key as usize]
            .lock
            .is_some_and(|l| (l.replica, l.fence) != (replica, fence))
    }

    /// The first statement of a fenced transaction: `fence::advance`,
    /// `ADVANCE_FENCE` in `src/lease/fence.rs`, sent by
    /// `FenceGuard::begin_fenced_on` (`src/guard.rs`).
    ///
    /// `INSERT … ON CONFLICT (resource) DO UPDATE SET last_fence = … WHERE
    /// f.last_fence <= EXCLUDED.last_fence` (F1, F2), which keeps the row
    /// locked until the transaction ends (F3): a concurrent advance waits
    /// ([`Fenced::Waits`]: the caller keeps it pending and runs it again
    /// once the lock is free, when it sees the committed value). The
    /// accepted advance starts the transaction's idle time (R2).
    pub fn advance(&mut self, key: u8, fence: u8, replica: u8) -> Fenced {
        if self.locked_by_other(key, replica, fence) {
            return Fenced::Waits;
        }
        let now = self.clock;
        let row = &mut self.fence_rows[key as usize];
        if row.last <= fence {
            let prev = row.lock.map_or(row.last, |l| l.prev);
            row.lock = Some(Lock {
                replica,
                fence,
                prev,
                idle_since: Some(now),
            });
            row.last = fence;
            Fenced::Accepted
        } else {
            Fenced::Rejected
        }
    }

    /// `COMMIT` of the fenced transaction of `(replica, fence)` on `key`.
    ///
    /// With `check` (R1, the deferred constraint trigger on
    /// `leasehold_fence`), the commit is refused — the transaction rolled
    /// back — unless its tenure is live at this instant
    /// ([`Db::tenure_live`]). A commit is atomic here; a real one that
    /// passed the check becomes visible up to its commit duration later,
    /// but it keeps the fence row locked until then, so a successor's
    /// advance is ordered after it.
    pub fn commit(&mut self, key: u8, replica: u8, fence: u8, check: bool) -> Commit {
        let mine = self.fence_rows[key as usize]
            .lock
            .is_some_and(|l| (l.replica, l.fence) == (replica, fence));
        if !mine {
            return Commit::Gone;
        }
        if check && !self.tenure_live(key, fence) {
            self.rollback(key, replica, fence);
            return Commit::Refused;
        }
        self.fence_rows[key as usize].lock = None;
        Commit::Committed
    }

    /// `ROLLBACK` of the transaction of `(replica, fence)` (dropped with
    /// its run, its connection closed by a crash, C2, or ended by the
    /// server): the advance is undone, the lock released.
    pub fn rollback(&mut self, key: u8, replica: u8, fence: u8) {
        let row = &mut self.fence_rows[key as usize];
        if let Some(l) = row.lock
            && (l.replica, l.fence) == (replica, fence)
        {
            row.last = l.prev;
            row.lock = None;
        }
    }

    /// R2: whether the open transaction on `key` has been idle for a whole
    /// `lease` on the server clock, so `idle_in_transaction_session_timeout`
    /// ends it ([`Db::end_idle`]).
    pub fn idle_expired(&self, key: u8, lease: u16) -> bool {
        self.fence_rows[key as usize]
            .lock
            .and_then(|l| l.idle_since)
            .is_some_and(|since| self.clock >= since + lease)
    }

    /// R2: the server ends the idle transaction on `key` (terminates its
    /// session): rolled back, lock released, whatever its client is doing
    /// (frozen, dead, cut off by a half-open connection).
    pub fn end_idle(&mut self, key: u8) {
        if let Some(l) = self.fence_rows[key as usize].lock {
            self.rollback(key, l.replica, l.fence);
        }
    }

    /// A fenced `UPDATE` of a user table: `fence::fenced_update` (`UPDATE …
    /// SET …, last_fence = $fence WHERE <filters> AND last_fence <=
    /// $fence`, F4), sent by `FenceGuard::update_fenced` (`src/guard.rs`).
    /// Its `EXISTS (… live …)` clause (F5) is [`Db::tenure_live`], asked
    /// by the caller first: the statement is one atomic step.
    pub fn fenced_update(&mut self, key: u8, fence: u8) -> Fenced {
        let col = &mut self.column[key as usize];
        if *col <= fence {
            *col = fence;
            Fenced::Accepted
        } else {
            Fenced::Rejected
        }
    }

    /// An operator's forced revoke: `Controls::revoke(key, Force, [])`,
    /// `REVOKE` in `src/lease/revoke.rs`: the row takes a fresh fence from
    /// the sequence and expires now (`LEAST(expires_at, GREATEST(now,
    /// acquired_at + 1 µs))`); the key's fence row rises to it (`GREATEST`,
    /// F1). The fence row's upsert waits for an open fenced transaction.
    /// With a fleet-wide limit, the revoked tenure's slot row ends with it.
    /// Returns the new fence, or `None` when it has to wait or there is no
    /// row.
    pub fn revoke(&mut self, key: u8) -> Option<u8> {
        let now = self.clock;
        if self.fence_rows[key as usize].lock.is_some() {
            return None;
        }
        let row = self.rows[key as usize].as_mut()?;
        let old = row.fence;
        self.seq += 1;
        row.fence = self.seq;
        row.expires = row.expires.min(now.max(row.acquired + 1));
        let end = row.expires;
        for slot in self.slots.iter_mut().filter(|s| (s.key, s.fence) == (Some(key), old)) {
            slot.expires = slot.expires.min(end);
        }
        let f = &mut self.fence_rows[key as usize];
        f.last = f.last.max(self.seq);
        Some(self.seq)
    }
}
