//! The README's operators' example: a zoned nightly job that catches up on
//! missed nights and reads its slot, paused and resumed for a whole job.
use leasehold::{CatchUp, FenceGuard, FencedJob, JobError, Runtime, Schedule, operator::Target};

#[derive(FencedJob)]
#[job(key = "billing:{tenant}", cron = "0 3 * * *", tz = "Europe/Paris", catch_up = "all(7)")]
struct Billing {
    tenant: String,
}

impl Billing {
    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        let day = guard.slot().unwrap_or_else(|| guard.started_at()); // the night being billed
        println!("billing {} for {day}", self.tenant);
        Ok(())
    }
}

#[allow(dead_code)]
async fn demo(runtime: Runtime) -> leasehold::Result<()> {
    // During an incident: no replica starts a billing run, and those running stop.
    runtime.pause(&Target::job("billing"), true).await?;
    // Afterwards: each tenant runs the nights it missed (at most 7), oldest first.
    runtime.resume(&Target::job("billing")).await?;
    Ok(())
}

fn main() {
    let job = Billing { tenant: "acme".into() };
    assert_eq!((job.name(), job.key()), ("billing", "billing:acme".to_owned()));
    let settings = job.settings();
    let Schedule::Cron(cron) = settings.get_schedule() else {
        panic!("a cron schedule: {settings:?}");
    };
    assert_eq!(cron.time_zone(), "Europe/Paris");
    assert_eq!(settings.get_catch_up(), CatchUp::all(7));
}
