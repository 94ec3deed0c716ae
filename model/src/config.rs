//! The parameters of one check.

use crate::env::Faults;
use crate::variants::Variant;

/// The parameters of one check. Durations are in ticks of real time unless
/// named `_units` (clock units: `units_per_tick` per tick at nominal rate).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    /// Holder id of each replica (so its length is the replica count); two
    /// equal ids are two processes sharing one (a copied configuration).
    pub holders: Vec<u8>,
    /// Number of keys.
    pub keys: usize,
    /// Clock units per tick at nominal rate.
    pub units_per_tick: u16,
    /// Units a slow or fast clock loses or gains per tick: ρ =
    /// `drift / units_per_tick`.
    pub drift: u16,
    /// The lease, in server units.
    pub lease: u16,
    /// The heartbeat interval, in local units.
    pub heartbeat: u16,
    /// The deadline margin, in local units.
    pub margin: u16,
    /// The stop time `d`: ticks a cancelled run's code goes on.
    pub stop_ticks: u8,
    /// The scheduler's forced poll interval, in local units.
    pub poll: u16,
    /// How long the scheduler waits for a claim's answer, in local units
    /// (`CLAIM_TIMEOUT` in `src/runtime/scheduler.rs`: 10 s whatever the
    /// lease).
    pub claim_timeout: u16,
    /// The schedule's period, in server units.
    pub period: u16,
    /// Last tick of real time explored.
    pub horizon: u16,
    /// Faults the environment may inject in one execution.
    pub fault_budget: u8,
    /// Which faults.
    pub faults: Faults,
    /// Runs may call `FenceGuard::ensure`.
    pub ensure: bool,
    /// Runs may write downstream (fenced transactions and updates).
    pub writes: bool,
    /// The protocol variant.
    pub variant: Variant,
    /// Each runtime has a liveness session (its listener connection,
    /// `src/runtime/listen.rs`): it registers, confirms, and its claims
    /// name its registration as the row's `owner`, so a key whose owner's
    /// session is gone is taken over before its lease expires (issue 40).
    /// Off: no registration, `owner` NULL, takeover at expiry only (no
    /// listener, a pooler in transaction mode). The confirm runs every
    /// tick: its interval (250 ms against a 1 s grace) is below the
    /// model's resolution.
    pub liveness: bool,
    /// The grace, in units (server units for the claimer's `confirmed_at +
    /// grace <= now`, local units for the holder's stop deadline; 1 s by
    /// default).
    pub grace: u16,
    /// The margin of the holder's stop deadline on a lost session: `last
    /// successful confirm's send instant + grace − liveness_margin`, in
    /// local units.
    pub liveness_margin: u16,
    /// A fleet-wide limit N on the keys' kind (issue 44): every key is of
    /// one kind, and at no instant may more than N of its tenures be live.
    /// `None`: no limit (no slot rows; every other check).
    pub limit: Option<u8>,
}

impl Config {
    /// The CI bound: 2 replicas sharing one holder id, 1 key, ρ magnified
    /// to 10 %, lease 5 ticks, heartbeat 2, margin 2 (= 2ρ·lease + d with
    /// d = 1 tick), a poll every tick on any clock, period 4, 8 ticks of
    /// real time, 1 fault of any kind but a clock-rate change, a claim timeout of
    /// a sixth of the lease (10 s of the default 60 s).
    pub fn ci() -> Config {
        Config {
            holders: vec![0, 0],
            keys: 1,
            units_per_tick: 10,
            drift: 1,
            lease: 50,
            heartbeat: 20,
            margin: 20,
            stop_ticks: 1,
            poll: 9,
            // 10 s of the default 60 s lease.
            claim_timeout: 8,
            period: 40,
            horizon: 8,
            fault_budget: 1,
            faults: Faults {
                skew: false,
                ..Faults::ALL
            },
            ensure: true,
            writes: true,
            variant: Variant::Correct,
            liveness: true,
            // 2 ticks: below the lease less its margin (3 ticks), as 1 s
            // is far below 60 s, so a takeover of a dead holder comes
            // before its lease expires.
            grace: 20,
            // 2ρ·grace + d, as the lease's margin.
            liveness_margin: 14,
            limit: None,
        }
    }

    /// The fleet-wide limit's bound (issue 44): two keys of one kind with
    /// a limit of 1, two replicas with distinct holder ids, the faults
    /// that can make a tenure outlive its holder's view of it or race a
    /// claim — freeze, crash, session kill, lose or delay a message (no
    /// partition, shutdown, skew) — 1 fault, no writes, no `ensure`, 7
    /// ticks, a grace of 3 ticks.
    pub fn limited() -> Config {
        let ci = Config::ci();
        Config {
            holders: vec![0, 1],
            keys: 2,
            limit: Some(1),
            // 3 ticks, so that the stop deadline on a lost session
            // (`grace − liveness_margin`, 14 units) outlasts a confirm
            // interval (a tick) as 1 s outlasts 250 ms: a holder whose
            // session is killed re-points its runs and they go on (at
            // the CI bound's 2 ticks they are always stopped first), and
            // the slot's owner must follow (`Variant::SlotNotRepointed`).
            grace: 30,
            liveness_margin: 16,
            writes: false,
            ensure: false,
            faults: Faults {
                partition: false,
                shutdown: false,
                ..ci.faults
            },
            horizon: 7,
            ..ci
        }
    }

    /// The release-time bounds (`LEASEHOLD_MODEL_DEPTH=deep`), each
    /// [`Config::ci`] pushed further in one direction: clock-rate changes
    /// as faults; two faults (without writes and `ensure`); a third replica
    /// with its own holder id (idem); two keys, so renewals and claims are
    /// batched (idem, 7 ticks). Each stays below ~25 M states (~6 GB).
    pub fn deep() -> Vec<(&'static str, Config)> {
        let ci = Config::ci();
        let lean = Config {
            writes: false,
            ensure: false,
            ..ci.clone()
        };
        vec![
            (
                "deep: clock-rate changes",
                Config {
                    faults: Faults::ALL,
                    ..ci
                },
            ),
            (
                "deep: 2 faults",
                Config {
                    fault_budget: 2,
                    ..lean.clone()
                },
            ),
            (
                "deep: 3 replicas",
                Config {
                    holders: vec![0, 0, 1],
                    ..lean.clone()
                },
            ),
            (
                "deep: 2 keys",
                Config {
                    keys: 2,
                    horizon: 7,
                    ..lean
                },
            ),
        ]
    }

    /// `2ρ × lease + d` in local units: the margin §5 asks for.
    pub fn required_margin(&self) -> u16 {
        let drift_allowance = 2 * self.lease * self.drift / self.units_per_tick;
        drift_allowance + self.stop_ticks as u16 * self.units_per_tick
    }

    /// `2ρ × grace + d` in local units: the margin of the holder's stop
    /// deadline on a lost session, by the same argument as
    /// [`Config::required_margin`] (the claimer counts `grace` on the
    /// server clock from a `confirmed_at` no earlier than the confirm's
    /// send instant).
    pub fn required_liveness_margin(&self) -> u16 {
        let drift_allowance = 2 * self.grace * self.drift / self.units_per_tick;
        drift_allowance + self.stop_ticks as u16 * self.units_per_tick
    }

    /// Real ticks within which a due key with a live replica must be
    /// claimed when no fault strikes: one forced poll interval on the
    /// slowest clock, rounded up, plus one tick.
    pub fn response_bound(&self) -> u16 {
        let slow = self.units_per_tick - self.drift;
        self.poll.div_ceil(slow) + 1
    }

    /// The number of replicas.
    pub fn replicas(&self) -> usize {
        self.holders.len()
    }
}
