//! Runs one check and prints its numbers:
//! `cargo run -p leasehold-model --release --example check -- [ci|deepN|limited] [horizon] [faults] [variant] [flags…]`
//! (`deep0`…`deep3` are the bounds of `Config::deep`, `limited` the
//! fleet-wide limit's, `Config::limited`).
use leasehold_model::{Config, Variant, check};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut cfg = match args.first().map(String::as_str) {
        Some(d) if d.starts_with("deep") => {
            let i: usize = d.trim_start_matches("deep").parse().unwrap_or(0);
            Config::deep().swap_remove(i).1
        }
        Some("limited") => Config::limited(),
        _ => Config::ci(),
    };
    if let Some(h) = args.get(1) {
        cfg.horizon = h.parse().expect("horizon");
    }
    if let Some(f) = args.get(2) {
        cfg.fault_budget = f.parse().expect("faults");
    }
    if let Some(v) = args.get(3) {
        cfg.variant = match v.as_str() {
            "margin" => {
                cfg.margin = cfg.stop_ticks as u16 * cfg.units_per_tick;
                Variant::MarginBelowDrift
            }
            "renew" => Variant::RenewWithoutHolderFence,
            "renewunchecked" => Variant::RenewUncheckedAnswer,
            "reentrant" => Variant::ReentrantRunClaim,
            "delete" => Variant::DeleteOnRelease,
            "lateclaim" => Variant::LateClaimStarts,
            "unbounded" => Variant::UnboundedFencedTransaction,
            "nocommitcheck" => Variant::NoCommitCheck,
            "noidletimeout" => Variant::NoIdleTimeout,
            "nosessiontest" => Variant::NoSessionDeadTest,
            "nograce" => Variant::NoGrace,
            "nosessionstop" => Variant::NoSessionStop,
            "staleowner" => Variant::ClaimNamesStaleRegistration,
            "noslot" => Variant::NoKindSlot,
            "slotsnapshot" => Variant::SlotFreeFromLeaseRow,
            "slotlatest" => Variant::SlotFreeFromLatestLeaseRow,
            "slotnotrenewed" => Variant::SlotNotRenewed,
            "slotnotreleased" => Variant::SlotNotReleased,
            "noslottakeover" => Variant::NoSlotTakeover,
            "slotnotrepointed" => Variant::SlotNotRepointed,
            _ => Variant::Correct,
        };
    }
    for flag in args.iter().skip(4) {
        match flag.as_str() {
            "noskew" => cfg.faults.skew = false,
            "nowrites" => cfg.writes = false,
            "noensure" => cfg.ensure = false,
            "nocrash" => cfg.faults.crash = false,
            "noshutdown" => cfg.faults.shutdown = false,
            "nopartition" => cfg.faults.partition = false,
            "nofreeze" => cfg.faults.freeze = false,
            "onlyfreeze" => {
                cfg.faults = leasehold_model::env::Faults {
                    freeze: true,
                    ..leasehold_model::env::Faults::NONE
                }
            }
            "revoke" => cfg.faults.revoke = true,
            "noliveness" => cfg.liveness = false,
            "nokill" => cfg.faults.kill_session = false,
            "onlykill" => {
                cfg.faults = leasehold_model::env::Faults {
                    kill_session: true,
                    ..leasehold_model::env::Faults::NONE
                }
            }
            "addkill" => cfg.faults.kill_session = true,
            "addfreeze" => cfg.faults.freeze = true,
            "addpartition" => cfg.faults.partition = true,
            "addcut" => cfg.faults.cut_after_loss = true,
            "distinct" => cfg.holders = (0..cfg.holders.len() as u8).collect(),
            "three" => cfg.holders = vec![0, 0, 1],
            "twokeys" => cfg.keys = 2,
            "limit2" => cfg.limit = Some(2),
            "threekeys" => cfg.keys = 3,
            "addpartition2" => cfg.faults.partition = true,
            "addshutdown" => cfg.faults.shutdown = true,
            "nolose" => cfg.faults.lose = false,
            "nodelay" => cfg.faults.delay = false,
            other => panic!("unknown flag {other}"),
        }
    }
    let threads = std::env::var("THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let out = check(cfg.clone(), threads, None);
    println!(
        "{cfg:?}\nstates {} unique {} depth {} in {:.1?} done {}",
        out.states, out.unique, out.max_depth, out.elapsed, out.done
    );
    for (name, path) in &out.discoveries {
        println!("discovery {name}: {} steps", path.clone().into_actions().len());
        if std::env::var("TRACE").is_ok_and(|t| t == *name) {
            for (state, action) in path.clone().into_vec() {
                if let Some(action) = action {
                    println!("  t={:>2} S={:>3} {:?}", state.now, state.db.clock, action);
                }
            }
            println!("{:#?}", path.last_state());
        }
    }
}
