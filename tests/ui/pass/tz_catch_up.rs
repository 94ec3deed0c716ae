//! `tz` with `cron`, and every form of `catch_up`.
use leasehold::{CatchUp, FenceGuard, FencedJob, JobError, Schedule};

/// 02:30 on the clocks of Paris; after an outage, each of the last 7
/// missed nights runs.
#[derive(FencedJob)]
#[job(cron = "30 2 * * *", tz = "Europe/Paris", catch_up = "all(7)")]
struct NightlyParis;

impl NightlyParis {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

/// `tz` may come first, and `catch_up` with an interval.
#[derive(FencedJob)]
#[job(tz = "America/New_York", cron = "0 * * * *", catch_up = "skip")]
struct HourlyNewYork;

impl HourlyNewYork {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(FencedJob)]
#[job(every = "5m", catch_up = "once")]
struct SyncInventory;

impl SyncInventory {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

/// The bounds of `all(N)`.
#[derive(FencedJob)]
#[job(every = "1h", catch_up = "all(1)")]
struct Latest;

impl Latest {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(FencedJob)]
#[job(every = "1h", catch_up = "all(1000)")]
struct Backfill;

impl Backfill {
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {
    let settings = NightlyParis.settings();
    let Schedule::Cron(cron) = settings.get_schedule() else {
        panic!("a cron schedule: {settings:?}");
    };
    assert_eq!((cron.expression(), cron.time_zone()), ("30 2 * * *", "Europe/Paris"));
    assert_eq!(settings.get_catch_up(), CatchUp::all(7));

    let settings = HourlyNewYork.settings();
    let Schedule::Cron(cron) = settings.get_schedule() else {
        panic!("a cron schedule: {settings:?}");
    };
    assert_eq!((cron.expression(), cron.time_zone()), ("0 * * * *", "America/New_York"));
    assert_eq!(settings.get_catch_up(), CatchUp::Skip);

    assert_eq!(SyncInventory.settings().get_catch_up(), CatchUp::Once);
    assert_eq!(Latest.settings().get_catch_up(), CatchUp::All { max: 1 });
    assert_eq!(Backfill.settings().get_catch_up(), CatchUp::All { max: 1000 });
}
