//! Chaos harness: replica **processes** running leasehold jobs under
//! injected faults, and a checker that judges what reached the database.
//!
//! ```sh
//! cargo run --release --example chaos -- --replicas 5 --jobs 20 --duration 120s --seed 42
//! DATABASE_URL=postgres://user:pw@host/db cargo run --release --example chaos -- --duration 60s
//! cargo run --release --example chaos -- --duration 60s --unsafe-unfenced   # must report violations
//! ```
//!
//! What it does:
//! 1. starts a throwaway PostgreSQL (`leasehold-testkit`), unless
//!    `DATABASE_URL` is set (then the PostgreSQL-restart faults are skipped
//!    and nothing in the server's configuration is changed); turns
//!    `synchronous_commit` on for the throwaway cluster (see `--async-commit`);
//! 2. creates a fresh database, migrates, creates the ledger tables;
//! 3. starts `--replicas` replica processes (this binary re-executed with
//!    `--replica <n> --database-url ...`), each a `Runtime` with the same
//!    `--jobs` jobs `chaos:0..N`, every `--period`, lease `--lease`; a run is
//!    `--steps` steps `--step-pause` apart, each a fenced transaction
//!    appending a ledger row (key, fence, run id, step, holder, slot served,
//!    server `clock_timestamp()`, and, from a deferred trigger, the time
//!    its transaction committed), then a fenced column write of the key's
//!    counter row (a trigger keeps the counter's history). Each replica
//!    also runs `--limited-jobs` keys `limited:0..K` of the job `limited`,
//!    the same runs under another name; once every key has run, the
//!    orchestrator sets that job's fleet-wide limit to `--fleet-limit`
//!    (`Controls::set_limit`): every key falls due at each slot, more than
//!    the limit at once, so the limit holds them back (check 18). Each replica
//!    reaches the database through its own TCP proxy in this process, and
//!    logs its runs (start, done, stale, cancelled, failed, dropped, and
//!    `hold`: a fenced transaction held open for `stop-in-fence`) to a
//!    file;
//! 4. injects faults for `--duration`, one every `--gap` (drawn from
//!    `--seed` with splitmix64): SIGSTOP past the lease then SIGCONT, SIGKILL
//!    and restart (of a replica, or of the one holding a running run:
//!    `kill-holder`), `pg_terminate_backend`, PostgreSQL fast and immediate
//!    restarts, proxy delay / blackhole / reset of one replica's traffic,
//!    a running lease expiring early on the server (operator
//!    `revoke --force`, or a forward step of the server clock), and two
//!    faults that leave a replica's pooled connection inside a transaction
//!    nobody owns (`poison.rs`: runs dropped inside `begin_fenced` behind a
//!    slow proxy, and a plain `BEGIN` on the shared pool), and a SIGSTOP
//!    of a replica while one of its runs holds a fenced transaction open
//!    (`stop_in_fence.rs`: less than, about, or several times the lease),
//!    and clock faults (`clock.rs`, libfaketime): a replica restarted with
//!    its clock running at `--clock-rates` (×0.95 or ×1.05 by default) for
//!    a few leases, or with its wall clock stepped an hour or five leases
//!    forward or back mid-run. With `--standby async|sync` the database
//!    runs on a primary with a streaming standby, and once per run, at
//!    `--promote-at`, the `promote` fault cuts replication, crashes the
//!    primary, promotes the standby and points every proxy at it
//!    (`promote.rs`).
//!    Replica faults aim at a replica that is running a job when there is
//!    one; while they run, the replicas' backends are sampled
//!    (`backends.rs`);
//! 5. heals everything, lets the fleet run for a quiet tail (`--tail`) in
//!    which every slot must run exactly once, scans `pg_stat_activity` for
//!    replica backends left idle in transaction, stops the fleet with
//!    SIGTERM (graceful shutdown), then checks (see `check.rs`,
//!    `commits.rs` and docs/operations.md) and prints a verdict table.
//!    Exit status 1 on any violation, 2 on a harness error.
//!
//! Flags (defaults in brackets): `--replicas` [5], `--jobs` [20],
//! `--limited-jobs` [4; 0: none], `--fleet-limit` [2],
//! `--duration` [120s], `--seed` [42], `--period` [2s], `--lease` [2s],
//! `--steps` [5], `--step-pause` [250ms], `--gap MIN..MAX` [1s..14s],
//! `--tail` [2 × (lease + period) + 6 periods, at least 10s; shorter is
//! refused], `--faults` [all: stop, kill, kill-holder, terminate, pg-fast, pg-immediate,
//! proxy-delay, proxy-blackhole, proxy-reset, expire, begin-drop,
//! raw-begin, stop-in-fence, clock-rate, clock-step; or `none`],
//! `--clock-rates` [0.95,1.05], `--standby async|sync` [none],
//! `--promote-at` [half of `--duration`], `--default-settings` [off: the
//! jobs' lease is `--lease`, their grace 300 ms, the poll interval 1 s],
//! `--body` [0: how long a run waits before its first step], `--drill
//! kill` [the replica-kill drill of `drill.rs` instead of the checker, with
//! its own defaults: 3 replicas, 1 job, 180 s, 1 step, a 1 s body, default
//! settings, `kill-holder` every 9–11 s], `--out DIR` [a temp dir; the
//! verdict, `ledger.tsv`, `leases.tsv`, `runs.tsv`, `faults.tsv`, replica logs and
//! stderr stay there], and three switches that remove a protection and must
//! make the checker fail:
//! - `--unsafe-unfenced`: jobs write with plain statements instead of
//!   fenced ones (the fence is still recorded in the ledger);
//! - `--async-commit`: leave the throwaway cluster's `synchronous_commit =
//!   off`, so an immediate restart may lose acknowledged lease and fence
//!   writes (the single-node analogue of an asynchronous failover);
//! - `--unsafe-no-fence-jump` (with `--standby async`): the fence sequence
//!   no longer jumps on a new timeline, so the promotion hands out the lag
//!   window's fences again.

mod args;
mod backends;
mod check;
mod clock;
mod commits;
mod drill;
mod faults;
mod poison;
mod promote;
mod replica;
mod servers;
mod stop_in_fence;

use leasehold_testkit::proxy;

use std::process::ExitCode;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use leasehold_testkit::PgCluster;
use leasehold_testkit::standby::Replicated;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool};
use tokio::time::Instant;

use args::Args;
use faults::{Chaos, FaultKind, Fleet};
use replica::now_us;
use servers::Servers;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if args.replica.is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "leasehold=warn".into()),
            )
            .with_target(false)
            .init();
        return match replica::main(args).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("replica failed: {e}");
                ExitCode::from(2)
            }
        };
    }
    match orchestrate(args).await {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("chaos harness error: {e}");
            ExitCode::from(2)
        }
    }
}

const SCHEMA: &str = "
CREATE TABLE chaos_ledger (
    id      BIGSERIAL   PRIMARY KEY,
    key     TEXT        NOT NULL,
    fence   BIGINT      NOT NULL,
    run_id  TEXT        NOT NULL,
    step    INT         NOT NULL,
    holder  TEXT        NOT NULL,
    slot    BIGINT      NOT NULL,
    fenced  BOOLEAN     NOT NULL,
    at      TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    xid     xid8        NOT NULL DEFAULT pg_current_xact_id()
);
-- When each ledger row's transaction committed: a deferred constraint
-- trigger runs at COMMIT, after the statements and the checks deferred
-- before it, just before the commit record is written.
CREATE TABLE chaos_ledger_commit (
    id BIGINT      PRIMARY KEY,
    at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION chaos_ledger_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_ledger_commit (id) VALUES (NEW.id);
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER chaos_ledger_commit AFTER INSERT ON chaos_ledger
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION chaos_ledger_commit();
CREATE TABLE chaos_counter (
    key        TEXT   PRIMARY KEY,
    last_step  INT    NOT NULL DEFAULT 0,
    last_run   TEXT   NOT NULL DEFAULT '',
    last_fence BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE chaos_counter_history (
    id        BIGSERIAL   PRIMARY KEY,
    key       TEXT        NOT NULL,
    old_fence BIGINT      NOT NULL,
    new_fence BIGINT      NOT NULL,
    run_id    TEXT        NOT NULL,
    at        TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    xid       xid8        NOT NULL DEFAULT pg_current_xact_id()
);
CREATE FUNCTION chaos_counter_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_counter_history (key, old_fence, new_fence, run_id)
    VALUES (NEW.key, OLD.last_fence, NEW.last_fence, NEW.last_run);
    RETURN NEW;
END $$;
CREATE TRIGGER chaos_counter_log AFTER UPDATE ON chaos_counter
    FOR EACH ROW EXECUTE FUNCTION chaos_counter_log();
";

async fn orchestrate(args: Args) -> Result<usize, BoxError> {
    let out = match &args.out {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("leasehold-chaos-{}", std::process::id())),
    };
    std::fs::create_dir_all(&out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    // A reused output directory: clear what an earlier run left (the replica
    // logs are appended to).
    for entry in std::fs::read_dir(&out)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = name.ends_with(".events")
            || (name.starts_with('r') && name.ends_with(".stderr"))
            || ["verdict.md", "faults.tsv", "ledger.tsv", "leases.tsv", "runs.tsv"].contains(&name.as_str());
        if ours {
            std::fs::remove_file(entry.path())?;
        }
    }
    let mode = if args.unsafe_unfenced {
        "UNSAFE: unfenced writes"
    } else {
        "fenced writes"
    };
    println!(
        "leasehold chaos: seed {}, {} replicas, {} jobs and {} limited to {} at once, {:?}, period {:?}, lease {:?}, \
         {} steps, {mode}; logs in {}",
        args.seed,
        args.replicas,
        args.jobs,
        args.limited_jobs,
        args.fleet_limit,
        args.duration,
        args.period,
        args.lease,
        args.steps,
        out.display()
    );

    // The database.
    let (cluster, server, base_url) = match std::env::var("DATABASE_URL") {
        _ if args.standby.is_some() => {
            let synchronous = args.standby == Some(true);
            let pair = Replicated::start(synchronous).await?;
            let server = pair.options();
            let url = format!("postgres://postgres@127.0.0.1:{}/postgres", server.get_port());
            println!(
                "throwaway primary on port {} with an {} standby on port {} (DATABASE_URL not used)",
                pair.primary.port(),
                if synchronous { "synchronous" } else { "asynchronous" },
                pair.standby.port()
            );
            (Some(Arc::new(Servers::pair(pair))), server, url)
        }
        Ok(url) => {
            let server = PgConnectOptions::from_str(&url).map_err(|e| format!("DATABASE_URL is not valid: {e}"))?;
            println!("using DATABASE_URL (PostgreSQL-restart faults skipped)");
            (None, server, url)
        }
        Err(_) => {
            let cluster = tokio::task::spawn_blocking(PgCluster::start).await??;
            let url = format!("postgres://postgres@127.0.0.1:{}/postgres", cluster.port());
            (
                Some(Arc::new(Servers::Single(cluster))),
                PgConnectOptions::from_str(&url)?,
                url,
            )
        }
    };
    if cluster.is_some() {
        // The throwaway cluster runs with synchronous_commit = off for
        // speed: an immediate restart could then lose acknowledged
        // commits, lease rows included. leasehold requires durable commits
        // (docs/operations.md); --async-commit keeps it off to show why.
        let setting = if args.async_commit { "off" } else { "on" };
        let mut admin = server.connect().await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "ALTER SYSTEM SET synchronous_commit = {setting}"
        )))
        .execute(&mut admin)
        .await?;
        sqlx::raw_sql("SELECT pg_reload_conf()").execute(&mut admin).await?;
        // ALTER SYSTEM stays on the primary; a role setting is in the
        // catalog, which the standby replicates and keeps once promoted.
        if cluster.as_ref().is_some_and(|c| matches!(**c, Servers::Pair { .. })) {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "ALTER ROLE postgres SET synchronous_commit = {setting}"
            )))
            .execute(&mut admin)
            .await?;
        }
        println!(
            "throwaway PostgreSQL on port {} (synchronous_commit = {setting})",
            server.get_port()
        );
    }
    // On the front proxy of a primary and standby the database is deleted
    // with the clusters, as on a single throwaway cluster.
    let db = match &cluster {
        Some(_) => leasehold_testkit::create_db_with(&server, leasehold_testkit::Cleanup::Keep).await,
        None => leasehold_testkit::create_db(&server).await,
    };
    let admin = PgPoolOptions::new()
        .max_connections(3)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(db.options.clone().application_name("chaos-orchestrator"))
        .await?;
    leasehold::migrate(&admin).await?;
    if args.unsafe_no_fence_jump {
        // The jump on a new timeline, removed: a session's first fence
        // neither records the timeline nor moves the sequence.
        sqlx::raw_sql(
            "CREATE OR REPLACE FUNCTION leasehold_observe_timeline(tl BIGINT) RETURNS VOID
             LANGUAGE plpgsql VOLATILE AS $$ BEGIN END $$",
        )
        .execute(&admin)
        .await?;
    }
    sqlx::raw_sql(SCHEMA).execute(&admin).await?;
    sqlx::raw_sql(commits::SCHEMA).execute(&admin).await?;
    if args.drill {
        sqlx::raw_sql(drill::SCHEMA).execute(&admin).await?;
    }
    let keys: Vec<String> = (0..args.jobs).map(|i| format!("chaos:{i}")).collect();
    let limited_keys: Vec<String> = (0..args.limited_jobs)
        .map(|i| format!("{}:{i}", replica::LIMITED_JOB))
        .collect();
    sqlx::query("INSERT INTO chaos_counter (key) SELECT unnest($1::text[])")
        .bind([keys.as_slice(), limited_keys.as_slice()].concat())
        .execute(&admin)
        .await?;
    let offset = clock_offset(&admin).await?;

    // A proxy in front of each replica's database connections, and the fleet.
    let mut proxies = Vec::new();
    // (On a throwaway cluster, straight to the writable server, so that a
    // promotion switches them.)
    let (host, port) = match &cluster {
        Some(servers) => ("127.0.0.1", servers.current().port()),
        None => (server.get_host(), server.get_port()),
    };
    for _ in 0..args.replicas {
        proxies.push(proxy::Proxy::start(host, port).await?);
    }
    let mut flags = args.replica_flags();
    flags.extend([
        "--database-url".to_owned(),
        base_url,
        "--database".to_owned(),
        db.name.clone(),
    ]);
    let exe = std::env::current_exe()?;
    let ports = proxies.iter().map(|p| p.port).collect();
    let mut fleet = Fleet::new(exe, flags, out.clone(), ports, args.replicas);
    for n in 0..args.replicas {
        fleet.spawn(n)?;
    }
    let mut chaos = Chaos::new(
        fleet,
        proxies,
        cluster.clone(),
        admin.clone(),
        (args.lease, args.period),
    );
    chaos.clock_rates = args.clock_rates.clone();
    chaos.synchronous_standby = args.standby == Some(true);
    let chaos = Arc::new(chaos);

    // Warm up: every replica has started and every job has run once.
    let warm = wait_for_every_key(&admin, args.jobs + args.limited_jobs, Duration::from_secs(60)).await;
    if !warm {
        eprintln!("warning: not every job ran within 60 s of start; going on");
    }
    // The limited job's limit, once its keys exist (a limit on a name no
    // key has is refused).
    let limit_set_at = match args.limited_jobs {
        0 => None,
        _ => Some(set_fleet_limit(&admin, args.fleet_limit).await?),
    };
    let observe_from = now_us() + offset;
    let watcher = backends::watch(admin.clone(), Duration::from_millis(250));
    println!("fleet up; injecting faults for {:?}", args.duration);

    let faketime = clock::libfaketime();
    if faketime.is_none() && args.faults.iter().any(|k| k.is_clock()) {
        println!(
            "libfaketime not found (apt-get install faketime libfaketime, or set CHAOS_LIBFAKETIME): clock faults skipped"
        );
    }
    let kinds: Vec<FaultKind> = args
        .faults
        .iter()
        .copied()
        .filter(|k| cluster.is_some() || !k.restarts_postgres())
        .filter(|k| faketime.is_some() || !k.is_clock())
        .filter(|k| !k.is_promotion())
        .collect();
    let started = Instant::now();
    let until = started + args.duration;
    let promotion = args.standby.map(|_| {
        let at = started + args.promote_at.unwrap_or(args.duration / 2);
        let frac = faults::SplitMix64::new(args.seed ^ 0x5052_4f4d).unit();
        tokio::spawn(promote::promote_at(chaos.clone(), at, frac))
    });
    chaos.run(args.seed, until, (args.gap_min, args.gap_max), &kinds).await;
    if args.drill {
        let span = (observe_from, observe_from + args.duration.as_micros() as i64);
        return kill_drill(&args, &admin, &chaos, &keys, &out, span, until).await;
    }
    if let Some(promotion) = promotion {
        promotion.await?;
    }
    let tail = args
        .tail
        .unwrap_or_else(|| check::min_tail(args.lease, args.period).max(Duration::from_secs(10)));
    println!("faults over; quiet tail of {tail:?} (no faults)");
    tokio::time::sleep(tail).await;
    let observe_to = now_us() + offset;
    // While the replicas still run: their pools' connections close with
    // them, and a connection left inside a transaction with them.
    let (mut orphans, samples) = watcher.finish().await;
    for o in &mut orphans {
        o.first_seen += offset;
        o.last_seen += offset;
    }
    let backends = backends::scan(&admin, args.lease).await?;
    let clean = chaos.fleet.lock().await.shutdown(Duration::from_secs(20)).await;
    println!("fleet stopped ({clean} of {} replicas exited cleanly)", args.replicas);

    // The checker.
    let input = gather(&admin, &args, &keys, &out, &chaos, offset, observe_from, observe_to).await?;
    let limited = match limit_set_at {
        Some(set_at) => Some(check::Limited {
            job: replica::LIMITED_JOB.to_owned(),
            keys: limited_keys,
            limit: args.fleet_limit,
            set_at,
            history: run_history(&admin, replica::LIMITED_JOB, &out).await?,
        }),
        None => None,
    };
    let input = check::Input {
        backends,
        orphans,
        samples,
        limited,
        ..input
    };
    let verdict = check::check(&input);
    let header = format!(
        "## chaos verdict: seed {}, {} replicas, {} jobs and {} limited to {} at once, {:?} of faults, period {:?}, \
         lease {:?}, {mode}\n\n",
        args.seed,
        args.replicas,
        args.jobs,
        args.limited_jobs,
        args.fleet_limit,
        args.duration,
        args.period,
        args.lease
    );
    println!("\n{header}{}", verdict.text);
    let _ = std::fs::write(out.join("verdict.md"), format!("{header}{}", verdict.text));
    println!(
        "VERDICT: {} ({} violations); details in {}",
        if verdict.violations == 0 { "PASS" } else { "FAIL" },
        verdict.violations,
        out.display()
    );
    drop(chaos);
    if let Some(cluster) = cluster {
        // Dropping the last handle stops the throwaway cluster.
        drop(cluster);
    }
    Ok(verdict.violations)
}

/// The end of `--drill kill` (`drill.rs`): the rest of the drill's
/// duration (the fault loop returns after its last fault, up to a gap
/// before `until`) and a short tail for the last slot's run, the fleet
/// stopped (SIGTERM), then the drill's counts. Returns the number of
/// failed criteria.
async fn kill_drill(
    args: &Args,
    admin: &PgPool,
    chaos: &Chaos,
    keys: &[String],
    out: &std::path::Path,
    span: (i64, i64),
    until: Instant,
) -> Result<usize, BoxError> {
    println!(
        "faults over; the drill's end and {:?} for the last slot's run",
        args::DRILL_TAIL
    );
    tokio::time::sleep_until(until + args::DRILL_TAIL).await;
    let clean = chaos.fleet.lock().await.shutdown(Duration::from_secs(20)).await;
    println!("fleet stopped ({clean} of {} replicas exited cleanly)", args.replicas);
    let kills = chaos.holder_kills.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let skipped = chaos.skipped.lock().unwrap_or_else(|p| p.into_inner()).len();
    let input = drill::gather(admin, keys, args.period.as_micros() as i64, span, kills, skipped).await?;
    let report = drill::judge(&input);
    let header = format!(
        "## replica-kill drill: seed {}, {} replicas, {} job(s) every {:?} with a {:?} body, {} settings, \
         kill-holder every {:?}..{:?} for {:?}\n\n",
        args.seed,
        args.replicas,
        args.jobs,
        args.period,
        args.body,
        if args.default_settings {
            "the library's default"
        } else {
            "the harness's"
        },
        args.gap_min,
        args.gap_max,
        args.duration
    );
    println!("\n{header}{}", report.text);
    let _ = std::fs::write(out.join("drill.md"), format!("{header}{}", report.text));
    println!(
        "DRILL: {} (missed {}, doubled {}, overlapping {}, stale {}); details in {}",
        if report.violations == 0 { "PASS" } else { "FAIL" },
        report.missed,
        report.doubled,
        report.overlaps,
        report.stale,
        out.display()
    );
    Ok(report.violations)
}

/// Sets the limited job's fleet-wide limit (`--fleet-limit`) through the
/// library's operator API, as an operator would; returns when it was set,
/// on the server clock.
async fn set_fleet_limit(pool: &PgPool, limit: u32) -> Result<i64, BoxError> {
    let store = leasehold::store::LeaseStore::new(pool.clone());
    let job = replica::LIMITED_JOB;
    match store.controls().set_limit(job, limit, "chaos-orchestrator").await? {
        leasehold::operator::LimitSet::Set { .. } => {}
        _ => return Err(format!("setting the limit of {job}: no key of that job exists").into()),
    }
    let set = store.controls().limits().await?;
    let set_at = set
        .iter()
        .find(|l| l.job == job)
        .map(|l| l.set_at.timestamp_micros())
        .ok_or_else(|| format!("the limit of {job} was set but is not listed"))?;
    println!("fleet-wide limit of {job}: at most {limit} runs at once");
    Ok(set_at)
}

/// The run history (`leasehold_run`) of the job `job`, times on the
/// server clock; written to `runs.tsv` too, for post-mortems.
async fn run_history(pool: &PgPool, job: &str, out: &std::path::Path) -> Result<Vec<check::RunRecord>, BoxError> {
    let runs: Vec<check::RunRecord> = sqlx::query_as(
        "SELECT key, fence, holder, outcome, reason,
                (extract(epoch FROM started_at) * 1000000)::int8 AS started_at,
                (extract(epoch FROM ended_at) * 1000000)::int8 AS ended_at
           FROM leasehold_run WHERE job_name = $1 ORDER BY started_at",
    )
    .bind(job)
    .fetch_all(pool)
    .await?;
    let dump: String = runs
        .iter()
        .map(|r| {
            format!(
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                r.started_at,
                r.ended_at,
                r.key,
                r.fence,
                r.holder,
                r.outcome,
                r.reason.as_deref().unwrap_or("-")
            )
        })
        .collect();
    std::fs::write(out.join("runs.tsv"), dump)?;
    Ok(runs)
}

/// Server clock minus local clock, in µs (zero on one machine, give or take).
async fn clock_offset(pool: &PgPool) -> Result<i64, BoxError> {
    let before = now_us();
    let server: i64 = sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8")
        .fetch_one(pool)
        .await?;
    let after = now_us();
    Ok(server - (before + after) / 2)
}

async fn wait_for_every_key(pool: &PgPool, jobs: usize, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let seen: Result<i64, _> = sqlx::query_scalar("SELECT count(DISTINCT key) FROM chaos_ledger")
            .fetch_one(pool)
            .await;
        if seen.is_ok_and(|n| n as usize >= jobs) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    false
}

#[allow(clippy::too_many_arguments)]
async fn gather(
    pool: &PgPool,
    args: &Args,
    keys: &[String],
    out: &std::path::Path,
    chaos: &Chaos,
    offset: i64,
    observe_from: i64,
    observe_to: i64,
) -> Result<check::Input, BoxError> {
    let ledger: Vec<check::LedgerRow> = sqlx::query_as(
        "SELECT l.id, l.key, l.fence, l.run_id, l.step, l.holder, l.slot,
                (extract(epoch FROM l.at) * 1000000)::int8 AS at,
                (extract(epoch FROM c.at) * 1000000)::int8 AS committed,
                l.xid::text::int8 AS xid
           FROM chaos_ledger l LEFT JOIN chaos_ledger_commit c USING (id) ORDER BY l.id",
    )
    .fetch_all(pool)
    .await?;
    let counter: Vec<check::CounterRow> = sqlx::query_as(
        "SELECT id, key, old_fence, new_fence, run_id, (extract(epoch FROM at) * 1000000)::int8 AS at,
                xid::text::int8 AS xid
           FROM chaos_counter_history ORDER BY id",
    )
    .fetch_all(pool)
    .await?;
    // The ledger, for post-mortems (the throwaway database is gone after).
    let dump: String = ledger
        .iter()
        .map(|r| {
            format!(
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                r.id,
                r.key,
                r.fence,
                r.run_id,
                r.step,
                r.holder,
                r.slot,
                r.at,
                r.committed.unwrap_or(0)
            )
        })
        .collect();
    std::fs::write(out.join("ledger.tsv"), dump)?;
    let mut events = Vec::new();
    for n in 0..args.replicas {
        let path = out.join(format!("r{n}.events"));
        let text = std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        // Replica logs read this machine's real clock: onto the server's.
        events.extend(text.lines().filter_map(check::Event::parse).map(|mut e| {
            e.at += offset;
            e
        }));
    }
    let windows = chaos
        .records
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|r| check::Window {
            kind: r.kind,
            replica: check::Window::replica_of(&r.target),
            reach: check::Reach::of(r.kind, &r.target),
            // An asynchronous promotion loses the lag window's renewals.
            expires_leases: r.kind == FaultKind::Expire
                || r.target.contains("+expired")
                || (r.kind == FaultKind::Promote && r.target.starts_with("async")),
            start: r.start_us + offset,
            end: r.end_us + offset,
        })
        .collect();
    let skipped = chaos.skipped.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let faults: String = chaos
        .records
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|r| {
            format!(
                "{}\t{}\t{}\t{}\n",
                r.start_us + offset,
                r.end_us + offset,
                r.kind.name(),
                r.target
            )
        })
        .collect();
    std::fs::write(out.join("faults.tsv"), faults)?;
    let lease_writes = commits::lease_writes(pool).await?;
    let dump: String = lease_writes
        .iter()
        .map(|w| {
            format!(
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                w.at, w.key, w.fence, w.holder, w.what, w.expires_at, w.xid
            )
        })
        .collect();
    std::fs::write(out.join("leases.tsv"), dump)?;
    let promotion = chaos.promotion.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let promotion = match promotion {
        Some(p) => {
            let recorded: Option<(i64, Option<i64>, Option<i64>)> =
                sqlx::query_as("SELECT timeline, jumped_from, jumped_to FROM leasehold_timeline")
                    .fetch_optional(pool)
                    .await?;
            Some(check::Promotion {
                at: p.shifted(offset),
                timeline: recorded.map(|r| r.0),
                jump: recorded.and_then(|r| r.1.zip(r.2)),
            })
        }
        None => None,
    };
    Ok(check::Input {
        keys: keys.to_vec(),
        replicas: args.replicas,
        period_us: args.period.as_micros() as i64,
        poll_us: replica::POLL_INTERVAL.as_micros() as i64,
        lease_us: args.lease.as_micros() as i64,
        steps: args.steps,
        observe_from,
        observe_to,
        ledger,
        counter,
        lease_writes,
        events,
        windows,
        skipped,
        backends: backends::Scan::default(),
        orphans: Vec::new(),
        samples: 0,
        promotion,
        limited: None,
    })
}
