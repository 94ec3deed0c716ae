//! Runs one check and prints its numbers:
//! `cargo run -p leasehold-model --release --example check -- [ci|deep] [horizon] [faults] [variant]`.
use leasehold_model::{Config, Variant, check};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut cfg = match args.first().map(String::as_str) {
        Some("deep") => Config::deep(),
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
            "reentrant" => Variant::ReentrantRunClaim,
            "delete" => Variant::DeleteOnRelease,
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
            "revoke" => cfg.faults.revoke = true,
            "distinct" => cfg.holders = (0..cfg.holders.len() as u8).collect(),
            "three" => cfg.holders = vec![0, 0, 1],
            "twokeys" => cfg.keys = 2,
            other => panic!("unknown flag {other}"),
        }
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let out = check(cfg.clone(), threads, None);
    println!(
        "{cfg:?}\nstates {} unique {} depth {} in {:.1?} done {}",
        out.states, out.unique, out.max_depth, out.elapsed, out.done
    );
    for (name, path) in &out.discoveries {
        println!("discovery {name}: {} steps", path.clone().into_actions().len());
    }
}
