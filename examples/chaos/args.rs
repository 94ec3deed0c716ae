//! Command-line flags, parsed by hand (no dependency).

use std::path::PathBuf;
use std::time::Duration;

use crate::faults::FaultKind;

/// Every flag of both modes (orchestrator and replica).
#[derive(Debug, Clone)]
pub struct Args {
    pub replicas: usize,
    pub jobs: usize,
    /// Keys of the limited job (`limited:0..K`), whose runs the fleet-wide
    /// limit [`Args::fleet_limit`] holds to N at once (0: none).
    pub limited_jobs: usize,
    /// The limited job's fleet-wide limit, set by the orchestrator once
    /// every key has run (check 18).
    pub fleet_limit: u32,
    pub duration: Duration,
    pub seed: u64,
    pub period: Duration,
    pub lease: Duration,
    pub steps: u32,
    pub step_pause: Duration,
    pub gap_min: Duration,
    pub gap_max: Duration,
    pub tail: Option<Duration>,
    pub unsafe_unfenced: bool,
    pub async_commit: bool,
    pub faults: Vec<FaultKind>,
    /// The rates a `clock-rate` fault runs a replica's clock at.
    pub clock_rates: Vec<f64>,
    pub out: Option<PathBuf>,
    /// Run on a primary with a streaming standby, and promote it once
    /// (`promote.rs`): `Some(true)` for synchronous replication.
    pub standby: Option<bool>,
    /// When the promotion starts (the replication cut), from the start of
    /// the faults; half of `--duration` by default.
    pub promote_at: Option<Duration>,
    /// Remove the fence jump on a new timeline (must make a promotion
    /// repeat fences).
    pub unsafe_no_fence_jump: bool,
    /// `--drill kill`: the replica-kill drill (`drill.rs`) instead of the
    /// checker, with its own defaults ([`Args::kill_drill`]).
    pub drill: bool,
    /// Jobs run with the library's default settings (lease, heartbeat,
    /// grace, retry, poll interval) instead of `--lease` and the harness's
    /// short ones.
    pub default_settings: bool,
    /// How long a run waits (cancellably) before its first step: a body
    /// that takes time, as a real job's does.
    pub body: Duration,
    // Replica mode (set by the orchestrator when it re-executes itself).
    pub replica: Option<usize>,
    pub generation: u32,
    pub database_url: Option<String>,
    pub database: Option<String>,
    pub via_port: Option<u16>,
    pub log: Option<PathBuf>,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            replicas: 5,
            jobs: 20,
            limited_jobs: 4,
            fleet_limit: 2,
            duration: Duration::from_secs(120),
            seed: 42,
            period: Duration::from_secs(2),
            lease: Duration::from_secs(2),
            steps: 5,
            step_pause: Duration::from_millis(250),
            gap_min: Duration::from_secs(1),
            gap_max: Duration::from_secs(14),
            tail: None,
            unsafe_unfenced: false,
            async_commit: false,
            faults: FaultKind::ALL.to_vec(),
            clock_rates: vec![0.95, 1.05],
            out: None,
            standby: None,
            promote_at: None,
            unsafe_no_fence_jump: false,
            drill: false,
            default_settings: false,
            body: Duration::ZERO,
            replica: None,
            generation: 0,
            database_url: None,
            database: None,
            via_port: None,
            log: None,
        }
    }
}

pub const USAGE: &str = "usage: cargo run --release --example chaos -- [--replicas 5] [--jobs 20] [--limited-jobs 4] [--fleet-limit 2] [--duration 120s] \
[--seed 42] [--period 2s] [--lease 2s] [--steps 5] [--step-pause 250ms] [--gap 1s..14s] [--tail 20s] \
[--faults stop,kill,kill-holder,terminate,pg-fast,pg-immediate,proxy-delay,proxy-blackhole,proxy-reset,expire,begin-drop,raw-begin,stop-in-fence,clock-rate,clock-step] \
[--clock-rates 0.95,1.05] [--standby async|sync|none] [--promote-at 30s] [--unsafe-unfenced] [--async-commit] \
[--unsafe-no-fence-jump] [--default-settings] [--body 1s] [--drill kill] [--out DIR]   (see docs/operations.md)";

/// How long the drill lets the fleet run after its duration before it
/// stops it and counts: the last slot's run (a 1 s body) has committed.
pub const DRILL_TAIL: Duration = Duration::from_secs(5);

impl Args {
    /// The replica-kill drill of issue 40 (`--drill kill`): 3 replicas, one
    /// job every 2 s whose body takes 1 s and then writes its slot through
    /// the fence, the library's default settings (lease 60 s), and a
    /// `kill-holder` about every 10 s for 180 s (90 slots). Flags given
    /// with `--drill kill` override these.
    pub fn kill_drill() -> Args {
        Args {
            replicas: 3,
            jobs: 1,
            limited_jobs: 0,
            duration: Duration::from_secs(180),
            period: Duration::from_secs(2),
            lease: leasehold::JobSettings::new(leasehold::Schedule::every(Duration::from_secs(2))).get_lease(),
            steps: 1,
            gap_min: Duration::from_secs(9),
            gap_max: Duration::from_secs(11),
            faults: vec![FaultKind::KillHolder],
            drill: true,
            default_settings: true,
            body: Duration::from_secs(1),
            ..Args::default()
        }
    }

    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
        let args: Vec<String> = args.into_iter().collect();
        // `--drill kill` sets the drill's defaults, wherever it stands.
        let mut out = Args::default();
        for (i, arg) in args.iter().enumerate() {
            let what = match arg.strip_prefix("--drill=") {
                Some(v) => Some(v),
                None if arg == "--drill" => args.get(i + 1).map(String::as_str),
                None => None,
            };
            match what {
                Some("kill") => out = Args::kill_drill(),
                Some(other) => return Err(format!("--drill: {other:?} is not a drill (known: kill)\n{USAGE}")),
                None if arg == "--drill" => return Err(format!("--drill needs a value\n{USAGE}")),
                None => {}
            }
        }
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
                _ => (arg.clone(), None),
            };
            let mut value = || -> Result<String, String> {
                inline
                    .clone()
                    .or_else(|| it.next())
                    .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
            };
            match flag.as_str() {
                "--replicas" => out.replicas = number(&flag, &value()?)?,
                "--jobs" => out.jobs = number(&flag, &value()?)?,
                "--limited-jobs" => out.limited_jobs = number(&flag, &value()?)?,
                "--fleet-limit" => out.fleet_limit = number(&flag, &value()?)?,
                "--duration" => out.duration = duration(&flag, &value()?)?,
                "--seed" => out.seed = number(&flag, &value()?)?,
                "--period" => out.period = duration(&flag, &value()?)?,
                "--lease" => out.lease = duration(&flag, &value()?)?,
                "--steps" => out.steps = number(&flag, &value()?)?,
                "--step-pause" => out.step_pause = duration(&flag, &value()?)?,
                "--gap" => {
                    let v = value()?;
                    let (lo, hi) = v
                        .split_once("..")
                        .ok_or_else(|| format!("--gap takes MIN..MAX (e.g. 1s..14s), not {v:?}"))?;
                    out.gap_min = duration(&flag, lo)?;
                    out.gap_max = duration(&flag, hi)?;
                }
                "--tail" => out.tail = Some(duration(&flag, &value()?)?),
                "--faults" => {
                    let v = value()?;
                    out.faults = if v == "none" {
                        Vec::new()
                    } else {
                        v.split(',').map(FaultKind::parse).collect::<Result<_, _>>()?
                    };
                }
                "--clock-rates" => {
                    out.clock_rates = value()?
                        .split(',')
                        .map(|r| match r.trim().parse::<f64>() {
                            Ok(rate) if (0.1..=10.0).contains(&rate) => Ok(rate),
                            _ => Err(format!("--clock-rates: {r:?} is not a rate from 0.1 to 10 (e.g. 0.95)")),
                        })
                        .collect::<Result<_, _>>()?;
                }
                "--unsafe-unfenced" => out.unsafe_unfenced = true,
                "--async-commit" => out.async_commit = true,
                "--standby" => {
                    out.standby = match value()?.as_str() {
                        "async" => Some(false),
                        "sync" => Some(true),
                        "none" => None,
                        other => {
                            return Err(format!("--standby: {other:?} is not async, sync or none\n{USAGE}"));
                        }
                    }
                }
                "--promote-at" => out.promote_at = Some(duration(&flag, &value()?)?),
                "--unsafe-no-fence-jump" => out.unsafe_no_fence_jump = true,
                "--drill" => {
                    // Read above; only its value to skip here.
                    let _ = value()?;
                }
                "--default-settings" => out.default_settings = true,
                "--body" => out.body = duration(&flag, &value()?)?,
                "--out" => out.out = Some(PathBuf::from(value()?)),
                "--replica" => out.replica = Some(number(&flag, &value()?)?),
                "--generation" => out.generation = number(&flag, &value()?)?,
                "--database-url" => out.database_url = Some(value()?),
                "--database" => out.database = Some(value()?),
                "--via-port" => out.via_port = Some(number(&flag, &value()?)?),
                "--log" => out.log = Some(PathBuf::from(value()?)),
                "-h" | "--help" => return Err(USAGE.to_owned()),
                other => return Err(format!("unknown flag {other:?}\n{USAGE}")),
            }
        }
        out.validate()?;
        Ok(out)
    }

    fn validate(&self) -> Result<(), String> {
        let bad = |what: &str, why: &str| Err(format!("{what}: {why}\n{USAGE}"));
        if self.replicas == 0 || self.replicas > 64 {
            return bad("--replicas", "between 1 and 64");
        }
        if self.jobs == 0 || self.jobs > 1000 {
            return bad("--jobs", "between 1 and 1000");
        }
        if self.limited_jobs > 1000 {
            return bad("--limited-jobs", "between 0 and 1000");
        }
        if self.fleet_limit == 0 || self.fleet_limit > leasehold::operator::MAX_FLEET_LIMIT {
            return bad("--fleet-limit", "between 1 and 10000 runs at once");
        }
        if self.drill && self.limited_jobs > 0 {
            return bad("--limited-jobs", "0 with --drill (the drill counts one job's slots)");
        }
        if self.steps == 0 || self.steps > 100 {
            return bad("--steps", "between 1 and 100");
        }
        if self.period < Duration::from_millis(200) {
            return bad("--period", "at least 200ms");
        }
        if self.lease < Duration::from_millis(300) {
            return bad("--lease", "at least 300ms");
        }
        if self.gap_max < self.gap_min || self.gap_min.is_zero() {
            return bad("--gap", "MIN must be above zero and MAX at least MIN");
        }
        if self.standby.is_none() && (self.promote_at.is_some() || self.unsafe_no_fence_jump) {
            return bad(
                "--promote-at and --unsafe-no-fence-jump",
                "need a standby to promote: add --standby async (or sync)",
            );
        }
        if self.promote_at.is_some_and(|at| at >= self.duration) {
            return bad("--promote-at", "before the end of --duration");
        }
        if self.drill && (self.faults.is_empty() || self.standby.is_some()) {
            return bad(
                "--drill",
                "runs on one PostgreSQL (no --standby) with its fault (--faults kill-holder by default)",
            );
        }
        let min_tail = crate::check::min_tail(self.lease, self.period);
        if !self.drill && self.tail.is_some_and(|t| t < min_tail) {
            return bad(
                "--tail",
                &format!(
                    "at least {min_tail:?} with this lease and period: 2 × (lease + period) + {} periods, \
                     so that the quiet tail has {} slots to check",
                    crate::check::QUIET_SLOTS + 1,
                    crate::check::QUIET_SLOTS
                ),
            );
        }
        Ok(())
    }

    /// The flags a replica process needs, to pass when re-executing.
    pub fn replica_flags(&self) -> Vec<String> {
        let mut flags = vec![
            "--jobs".to_owned(),
            self.jobs.to_string(),
            "--limited-jobs".to_owned(),
            self.limited_jobs.to_string(),
            "--period".to_owned(),
            format!("{}ms", self.period.as_millis()),
            "--lease".to_owned(),
            format!("{}ms", self.lease.as_millis()),
            "--steps".to_owned(),
            self.steps.to_string(),
            "--step-pause".to_owned(),
            format!("{}ms", self.step_pause.as_millis()),
        ];
        if self.unsafe_unfenced {
            flags.push("--unsafe-unfenced".to_owned());
        }
        if self.default_settings {
            flags.push("--default-settings".to_owned());
        }
        if !self.body.is_zero() {
            flags.extend(["--body".to_owned(), format!("{}ms", self.body.as_millis())]);
        }
        flags
    }
}

fn number<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.parse()
        .map_err(|_| format!("{flag}: {v:?} is not a valid number\n{USAGE}"))
}

/// `500ms`, `2s`, `10m`, `1h`, or a plain number of seconds.
pub fn duration(flag: &str, v: &str) -> Result<Duration, String> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let num: f64 = num
        .parse()
        .map_err(|_| format!("{flag}: {v:?} is not a duration (e.g. 500ms, 2s, 10m)"))?;
    let secs = match unit {
        "ms" => num / 1000.0,
        "" | "s" => num,
        "m" | "min" => num * 60.0,
        "h" => num * 3600.0,
        _ => return Err(format!("{flag}: unknown unit {unit:?} in {v:?} (use ms, s, m or h)")),
    };
    if !secs.is_finite() || !(0.0..=86_400.0 * 7.0).contains(&secs) {
        return Err(format!("{flag}: {v:?} is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}
