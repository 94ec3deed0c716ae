#!/usr/bin/env python3
"""The peer benchmark's driver: leasehold, River for Rust and graphile-worker
on one throwaway PostgreSQL, round by round, the same measurements for each.

Started by run.sh (which builds the clients first); see BENCHMARKS.md,
"Peers: River and graphile-worker, side by side", for the method.

Environment (all optional):
  PEERS_ROUNDS    ceiling rounds (default 3)
  PEERS_WARMUP    seconds before each window (default 3)
  PEERS_WINDOW    seconds of each window (default 10)
  PEERS_SYSTEMS   comma-separated subset of leasehold,leasehold_full,leasehold_limited,river,graphile
                  (leasehold_full: leasehold with every key's history ring
                  filled before it starts; leasehold_limited: leasehold under a
                  fleet-wide limit that never binds; both no-op body only,
                  ceiling only), plus leasehold_before with PEERS_BEFORE
  PEERS_BEFORE    path of another build of peers-client (e.g. of an earlier
                  commit): its leasehold runs as the system leasehold_before,
                  alternating with the others in the same run (a before/after
                  comparison on one machine at one time)
  PEERS_BODIES    comma-separated body lengths in µs (default 0,1000)
  PEERS_LATENCY   0 to skip the trigger → start phases (default 1)
  PEERS_EXPLAIN   0 to skip the auto_explain run of leasehold (default 1)
  PEERS_PERF      1 to profile every window with `perf record -e cpu-clock` (the
                  server's processes and the client apart; flat, by symbol);
                  callgraph: the client's with DWARF call graphs, reported with
                  each function's inclusive share
  PEERS_PROBES    probes per latency measurement (default 60)
  PEERS_LIGHT     keys (leasehold) or jobs (River, graphile-worker) per 100 ms
                  for the light-load phase, each system once: CPU per run
                  when batches hold a run or two (default 2; 0 skips it)
  PEERS_OUT       directory for the raw outputs (default: a new temporary one)
  PEERS_ANALYZE   0 to skip the ANALYZE of each round's database after its
                  warm-up (default 1)
  PEERS_PGCONF    extra postgresql.conf lines, separated by ";" (e.g.
                  "autovacuum_naptime = 1"): the server's settings for a
                  what-if run, printed with the table
"""

import atexit
import glob
import json
import os
import pwd
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
CLIENT = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(HERE, "target")), "release", "peers-client")
NODE_WORKER = os.path.join(HERE, "graphile", "worker.js")
BEFORE = os.environ.get("PEERS_BEFORE")

ROUNDS = int(os.environ.get("PEERS_ROUNDS", "3"))
WARMUP = float(os.environ.get("PEERS_WARMUP", "3"))
WINDOW = float(os.environ.get("PEERS_WINDOW", "10"))
SYSTEMS = os.environ.get("PEERS_SYSTEMS", "leasehold,leasehold_full,river,graphile").split(",")
BODIES = [int(b) for b in os.environ.get("PEERS_BODIES", "0,1000").split(",")]
LATENCY = os.environ.get("PEERS_LATENCY", "1") != "0"
EXPLAIN = os.environ.get("PEERS_EXPLAIN", "1") != "0"
PERF = os.environ.get("PEERS_PERF", "0") != "0"
CALLGRAPH = os.environ.get("PEERS_PERF") == "callgraph"
PROBES = int(os.environ.get("PEERS_PROBES", "60"))
LIGHT = int(os.environ.get("PEERS_LIGHT", "2"))
ANALYZE = os.environ.get("PEERS_ANALYZE", "1") != "0"
PGCONF = [line.strip() for line in os.environ.get("PEERS_PGCONF", "").split(";") if line.strip()]
OUT = os.environ.get("PEERS_OUT") or tempfile.mkdtemp(prefix="peers-out-")
# leasehold: 4 runtimes × 16,000 keys every 100 ms (160,000 runs/s demanded),
# as the ceiling of benches/leasehold's throughput scenario.
LEASEHOLD_KEYS = 16_000
LEASEHOLD_RUNTIMES = 4
# Client start, backlog insert included, may take this long.
READY_TIMEOUT = 300
TICK = os.sysconf("SC_CLK_TCK")

os.makedirs(OUT, exist_ok=True)
LOG = open(os.path.join(OUT, "log.txt"), "a")


def log(msg):
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, file=sys.stderr, flush=True)
    LOG.write(line + "\n")
    LOG.flush()


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# ------------------------------------------------------------------ cluster


def find_bin():
    for d in os.environ.get("PATH", "").split(":"):
        if all(os.path.exists(os.path.join(d, b)) for b in ("initdb", "pg_ctl", "postgres")):
            return os.path.dirname(os.path.realpath(os.path.join(d, "initdb")))
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(d, "initdb")):
            return d
    sys.exit("no PostgreSQL server binaries (initdb, pg_ctl, postgres) on PATH or under /usr/lib/postgresql")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Cluster:
    """A throwaway durable cluster (fsync on), like testkit's
    `PgCluster::start_durable`: initdb as `postgres` (or `nobody`) when
    running as root, loopback only, removed at exit."""

    def __init__(self):
        self.bin = find_bin()
        self.dir = tempfile.mkdtemp(prefix="leasehold-peers-pg-")
        self.data = os.path.join(self.dir, "data")
        self.port = free_port()
        self.user = None
        if os.geteuid() == 0:
            for u in ("postgres", "nobody"):
                try:
                    pw = pwd.getpwnam(u)
                    self.user = u
                    os.chown(self.dir, pw.pw_uid, pw.pw_gid)
                    break
                except KeyError:
                    pass
        atexit.register(self.destroy)
        self.cmd("initdb", "-D", self.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write(
                "\nmax_connections = 400\nlog_min_messages = warning\n"
                "shared_preload_libraries = 'pg_stat_statements'\n"
                "pg_stat_statements.max = 10000\n"
                # No checkpoint inside a round: a round's database is created,
                # filled and worked between two checkpoints (DROP DATABASE
                # makes one), so full-page images count the same for all.
                "max_wal_size = 32GB\ncheckpoint_timeout = 1h\n"
            )
            # Last, so they override the lines above.
            for line in PGCONF:
                f.write(line + "\n")
        opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir}"
        self.cmd("pg_ctl", "-D", self.data, "start", "-w", "-t", "60", "-l", os.path.join(self.dir, "server.log"),
                 "-o", opts)
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            self.pid = int(f.readline())
        self.version = self.sql("SHOW server_version")
        self.sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.sql("CREATE EXTENSION IF NOT EXISTS pg_walinspect")

    def cmd(self, prog, *args):
        argv = [os.path.join(self.bin, prog), *args]
        if self.user:
            argv = ["runuser", "-u", self.user, "--", *argv]
        r = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            sys.exit(f"{prog} failed: {r.stderr}")

    def destroy(self):
        if os.path.exists(self.data):
            argv = [os.path.join(self.bin, "pg_ctl"), "-D", self.data, "stop", "-m", "immediate"]
            if self.user:
                argv = ["runuser", "-u", self.user, "--", *argv]
            subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, db):
        return f"postgres://postgres@127.0.0.1:{self.port}/{db}"

    def sql(self, query, db="postgres"):
        r = subprocess.run(
            ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-F", "\t", self.url(db), "-c", query],
            capture_output=True, text=True, stdin=subprocess.DEVNULL,
        )
        if r.returncode != 0:
            raise RuntimeError(f"psql: {query[:200]}: {r.stderr}")
        return r.stdout.strip()

    def sessions(self, db):
        """Sessions opened on `db` since its statistics began."""
        return int(self.sql(f"SELECT sessions FROM pg_stat_database WHERE datname = '{db}'") or 0)

    def cpu_ticks(self):
        """utime + stime of every process of the cluster, and of the
        children the postmaster reaped (cutime + cstime): backends that
        exited inside a window count too."""
        st = proc_stat(self.pid)
        reaped = int(st[13]) + int(st[14]) if st else 0
        return reaped + sum(self.ticks_by_pid().values())

    def ticks_by_pid(self):
        """utime + stime of the postmaster and of each of its live
        children, by pid."""
        out = {}
        for entry in os.listdir("/proc"):
            pid = int(entry) if entry.isdigit() else None
            if pid and (st := proc_stat(pid)) is not None and (pid == self.pid or int(st[1]) == self.pid):
                out[pid] = int(st[11]) + int(st[12])
        return out

    def backends_split(self, before, after, db):
        """The window's server CPU by process, grouped by what the process
        is (pg_stat_activity: backend type, and for a client backend the
        first words of its last statement), as (group, processes, ticks),
        busiest first. Processes that exited inside the window are not in
        it (cpu_ticks counts them)."""
        rows = self.sql("SELECT pid, backend_type, coalesce(datname, ''), "
                        "left(regexp_replace(query, '\\s+', ' ', 'g'), 48) FROM pg_stat_activity")
        label = {self.pid: "postmaster"}
        for line in rows.splitlines():
            pid, kind, dat, query = (line.split("\t") + ["", "", "", ""])[:4]
            if kind == "client backend":
                kind = f"client backend: {query.strip()}" if dat == db else f"client backend ({dat or '-'})"
            label[int(pid)] = kind
        groups = {}
        for pid, t in after.items():
            d = t - before.get(pid, 0)
            g = groups.setdefault(label.get(pid, "other (no pg_stat_activity row)"), [0, 0])
            g[0] += 1
            g[1] += d
        return sorted(((k, n, t) for k, (n, t) in groups.items()), key=lambda x: -x[2])

    def wal(self):
        r, f, b = self.sql("SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal").split("\t")
        return int(r), int(f), int(b)


def proc_stat(pid):
    """Fields of /proc/<pid>/stat after the command name: [0] is state,
    [1] ppid, [11] utime, [12] stime, [13] cutime, [14] cstime."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    return s[s.rindex(")") + 2:].split()


def client_ticks(pid):
    st = proc_stat(pid)
    return int(st[11]) + int(st[12]) + int(st[13]) + int(st[14]) if st else 0


# ------------------------------------------------------------------ clients


class Client:
    def __init__(self, system, url, body_us, size, feed=0):
        if system == "graphile":
            argv = ["node", NODE_WORKER, url, str(body_us), str(size), str(feed)]
        elif system == "leasehold_before":
            if not BEFORE:
                sys.exit("leasehold_before needs PEERS_BEFORE (the path of the earlier peers-client)")
            argv = [BEFORE, "leasehold", url, str(body_us), str(size), str(feed)]
        else:
            argv = [CLIENT, system, url, str(body_us), str(size), str(feed)]
        self.err = open(os.path.join(OUT, "client-stderr.txt"), "a")
        self.err.write(f"--- {' '.join(argv)}\n")
        self.err.flush()
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True,
                                  bufsize=1, env={**os.environ, "RUST_LOG": "warn"})
        self.expect("ready", READY_TIMEOUT)

    def expect(self, word, timeout):
        deadline = time.time() + timeout
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError(f"client exited (status {self.p.poll()}) before {word!r}; see client-stderr.txt")
            if line.split() and line.split()[0] == word:
                return line.split()[1:]
            if time.time() > deadline:
                raise RuntimeError(f"no {word!r} within {timeout} s")

    def mark(self):
        self.p.stdin.write("mark\n")
        self.p.stdin.flush()
        runs, t = self.expect("mark", 30)
        return int(runs), float(t)

    def probe(self, n):
        self.p.stdin.write(f"probe {n}\n")
        self.p.stdin.flush()
        return [int(x) for x in self.expect("probe", n * 6 + 30)]

    def stop(self):
        try:
            self.p.stdin.write("stop\n")
            self.p.stdin.flush()
            self.expect("stopped", 60)
            self.p.wait(30)
        except Exception as e:  # noqa: BLE001
            log(f"client did not stop cleanly ({e}); killing it")
            self.p.kill()
            self.p.wait()
        self.err.close()


# ------------------------------------------------------------------ one measurement

STMTS = """SELECT calls, total_exec_time, rows, shared_blks_hit, shared_blks_read, shared_blks_dirtied,
       wal_records, wal_fpi, wal_bytes, regexp_replace(query, '\\s+', ' ', 'g')
  FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '{db}')
 ORDER BY total_exec_time DESC"""


def measure(cluster, system, body_us, mode, round_no, size, feed=0, probes=0):
    """Starts `system` on a fresh database, waits WARMUP, measures WINDOW,
    probes trigger → start if asked, stops. Returns a dict of results."""
    db = f"{system}_{mode}_{body_us}_{round_no}"
    cluster.sql(f"DROP DATABASE IF EXISTS {db}")
    cluster.sql(f"CREATE DATABASE {db}")
    load0 = loadavg()
    log(f"{system} body {body_us} µs, {mode}, round {round_no}: size {size}, feed {feed}; load {load0}")
    t_setup = time.time()
    c = Client(system, cluster.url(db), body_us, size, feed)
    setup_s = time.time() - t_setup
    res = {"system": system, "body_us": body_us, "mode": mode, "round": round_no, "size": size, "feed": feed,
           "load_before": load0, "setup_s": round(setup_s, 1)}
    try:
        time.sleep(WARMUP)
        if ANALYZE:
            # What autovacuum does within a minute of a fresh database in
            # production, and what River's set-up does after its backlog
            # (`VACUUM ANALYZE river_job`): the tables' statistics taken as
            # they are now. It invalidates the plans cached while the
            # tables were empty, so the window measures plans made for the
            # tables' real sizes (leasehold's release had planned a scan of
            # its whole history table, then a few pages long).
            cluster.sql("ANALYZE", db=db)
        cluster.sql("SELECT pg_stat_statements_reset()")
        w0 = cluster.wal()
        lsn0 = cluster.sql("SELECT pg_current_wal_lsn()")
        n0 = cluster.sessions(db)
        s0 = cluster.cpu_ticks()
        p0 = cluster.ticks_by_pid()
        c0 = client_ticks(c.p.pid)
        r0, t0 = c.mark()
        perfs = start_perf(cluster, c, db) if PERF else []
        time.sleep(WINDOW)
        for p in perfs:
            p.send_signal(signal.SIGINT)
        r1, t1 = c.mark()
        c1 = client_ticks(c.p.pid)
        s1 = cluster.cpu_ticks()
        p1 = cluster.ticks_by_pid()
        n1 = cluster.sessions(db)
        w1 = cluster.wal()
        lsn1 = cluster.sql("SELECT pg_current_wal_lsn()")
        stmts = cluster.sql(STMTS.format(db=db))
        # Where the server's CPU went, by process kind (the listeners, the
        # pool's connections, the WAL writer…).
        split = cluster.backends_split(p0, p1, db)
        with open(os.path.join(OUT, f"backends-{db}.tsv"), "w") as f:
            f.write("process\tcount\tcpu_s\tshare\n")
            total = max(sum(t for _, _, t in split), 1)
            for k, n, t in split:
                f.write(f"{k}\t{n}\t{t / TICK:.2f}\t{100 * t / total:.1f} %\n")
        res["backends"] = [[k, n, t / TICK] for k, n, t in split]
        # The busiest tables' row versions and vacuums since the database
        # was created (cumulative; the statistics lag by up to a second).
        tables = cluster.sql(
            "SELECT relname, n_live_tup, n_dead_tup, n_tup_ins, n_tup_upd, n_tup_hot_upd, autovacuum_count "
            "FROM pg_stat_user_tables WHERE n_tup_upd + n_tup_ins > 0 ORDER BY n_tup_upd + n_tup_ins DESC LIMIT 6", db=db)
        with open(os.path.join(OUT, f"tables-{db}.tsv"), "w") as f:
            f.write("table\tlive\tdead\tinserted\tupdated\thot_updated\tautovacuums\n" + tables + "\n")
        res["tables"] = [line.split("\t") for line in tables.splitlines() if line]
        # The window's WAL by record type (pg_walinspect), read after the
        # CPU and WAL counters.
        # (A window that wrote no WAL, an idle one, has nothing to read:
        # pg_get_wal_stats refuses an end that is its start.)
        kinds = "" if lsn0 == lsn1 else cluster.sql(
            f"SELECT \"resource_manager/record_type\", count, combined_size FROM pg_get_wal_stats('{lsn0}', "
            f"'{lsn1}', true) WHERE count > 0 ORDER BY count DESC")
        with open(os.path.join(OUT, f"wal-{db}.tsv"), "w") as f:
            f.write("record_type\tcount\tbytes\n" + kinds + "\n")
        res["wal_kinds"] = {line.split("\t")[0]: [int(line.split("\t")[1]), int(line.split("\t")[2])]
                            for line in kinds.splitlines() if line}
        runs = r1 - r0
        secs = t1 - t0
        res.update({
            "runs": runs, "secs": secs, "runs_per_s": runs / secs if secs else 0,
            "runs_total_at_end": r1,
            "client_cpu_s": (c1 - c0) / TICK, "server_cpu_s": (s1 - s0) / TICK,
            "wal_records": w1[0] - w0[0], "wal_fpi": w1[1] - w0[1], "wal_bytes": w1[2] - w0[2],
            "load_after": loadavg(), "sessions_opened": n1 - n0,
        })
        # The backlog must outlast the window, or the figure is not a ceiling.
        res["drained"] = not system.startswith("leasehold") and mode == "ceiling" and r1 >= size - 1
        with open(os.path.join(OUT, f"statements-{db}.tsv"), "w") as f:
            f.write("calls\ttotal_exec_ms\trows\tshared_hit\tshared_read\tshared_dirtied\twal_records\twal_fpi\t"
                    "wal_bytes\tquery\n")
            f.write(stmts + "\n")
        res["statements"] = [
            dict(zip(["calls", "total_ms", "rows", "hit", "read", "dirtied", "wal_records", "wal_fpi", "wal_bytes",
                      "query"], line.split("\t")))
            for line in stmts.splitlines() if line
        ]
        for p in perfs:
            p.wait(60)
        if probes:
            res["probes_us"] = c.probe(probes)
    finally:
        c.stop()
    cluster.sql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    per = max(res.get("runs", 0), 1)
    log(f"   {res.get('runs_per_s', 0):.0f} runs/s; CPU µs/run client {res['client_cpu_s'] * 1e6 / per:.1f} "
        f"server {res['server_cpu_s'] * 1e6 / per:.1f}; WAL/run {res['wal_records'] / per:.2f} rec "
        f"{res['wal_bytes'] / per:.0f} B" + (" DRAINED" if res.get("drained") else "")
        + (f"; probes p50 {pct(res['probes_us'], 50) / 1000:.1f} ms" if res.get("probes_us") else ""))
    log(f"   sessions opened in the window: {res.get('sessions_opened')}")
    for t in res.get("tables", [])[:2]:
        log(f"   {t[0]}: {t[1]} live, {t[2]} dead, {t[4]} updated ({t[5]} HOT), {t[6]} autovacuums")
    with open(os.path.join(OUT, "results.jsonl"), "a") as f:
        f.write(json.dumps({k: v for k, v in res.items() if k != "statements"}) + "\n")
    return res


def start_perf(cluster, c, db):
    """`perf record` of the server's processes and of the client, for the
    window; reports by symbol are written after the run (`perf_reports`)."""
    server = [int(e) for e in os.listdir("/proc") if e.isdigit() and (st := proc_stat(int(e)))
              and int(st[1]) == cluster.pid] + [cluster.pid]
    out = []
    for who, pids in (("server", server), ("client", [c.p.pid])):
        # DWARF call graphs are heavy: a lower rate for them.
        rate = ["-F", "499", "--call-graph", "dwarf,32768"] if CALLGRAPH and who == "client" else ["-F", "997"]
        out.append(subprocess.Popen(
            ["perf", "record", "-q", "-e", "cpu-clock", *rate, "-o", os.path.join(OUT, f"perf-{who}-{db}.data"),
             "-p", ",".join(map(str, pids))], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return out


def perf_reports():
    for data in sorted(glob.glob(os.path.join(OUT, "perf-*.data"))):
        if CALLGRAPH and "perf-client-" in data:
            how = ["--children", "--sort", "sym", "-g", "none", "--percent-limit", "0.3"]
        else:
            how = ["--no-children", "--sort", "dso,sym", "--percent-limit", "0.05"]
        r = subprocess.run(["perf", "report", "--stdio", "-i", data, *how], capture_output=True, text=True)
        with open(data[:-5] + ".txt", "w") as f:
            f.write(r.stdout)
        os.remove(data)


def explain_phase(cluster):
    """One more leasehold no-op ceiling run, not in the table, with
    auto_explain logging EXPLAIN (ANALYZE, BUFFERS, WAL) of a sample of its
    statements as the runtimes send them (their own parameters, prepared
    statements included). The plans of the claim (`claim_due`) and the
    release (`finish_many`) go to explain-*.txt; the one of median duration
    of each is printed."""
    db = "leasehold_explain_0_1"
    cluster.sql(f"DROP DATABASE IF EXISTS {db}")
    cluster.sql(f"CREATE DATABASE {db}")
    for k, v in [("session_preload_libraries", "auto_explain"), ("auto_explain.log_min_duration", "0"),
                 ("auto_explain.log_analyze", "on"), ("auto_explain.log_buffers", "on"),
                 ("auto_explain.log_wal", "on"), ("auto_explain.log_timing", "on"),
                 ("auto_explain.sample_rate", "0.05")]:
        cluster.sql(f"ALTER DATABASE {db} SET {k} = '{v}'")
    logf = os.path.join(cluster.dir, "server.log")
    start = os.path.getsize(logf)
    # measure() drops and creates the database: give it the settings again
    # through a template instead. Simplest: run the client here directly.
    load0 = loadavg()
    log(f"leasehold body 0 µs, auto_explain run; load {load0}")
    c = Client("leasehold", cluster.url(db), 0, LEASEHOLD_KEYS)
    try:
        time.sleep(WARMUP + min(WINDOW, 5))
    finally:
        c.stop()
    cluster.sql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    with open(logf, errors="replace") as f:
        f.seek(start)
        text = f.read()
    plans = re.split(r"(?m)^(?=\S.*LOG:  duration: [0-9.]+ ms  plan:)", text)
    kinds = {"claim_due": [], "finish_many": [], "other": []}
    for p in plans:
        m = re.search(r"LOG:  duration: ([0-9.]+) ms  plan:", p)
        if not m:
            continue
        kind = ("claim_due" if "pick AS" in p and "claimed AS" in p
                else "finish_many" if "released AS" in p and "overwritten AS" in p else "other")
        kinds[kind].append((float(m.group(1)), p))
    for kind, ps in kinds.items():
        ps = sorted(ps, key=lambda x: x[0])
        # Five of them: the quartiles, the fastest and the slowest.
        pick = sorted({0, len(ps) // 4, len(ps) // 2, 3 * len(ps) // 4, len(ps) - 1}) if ps else []
        with open(os.path.join(OUT, f"explain-{kind}.txt"), "w") as f:
            f.write(f"# {len(ps)} plans logged by auto_explain (sample_rate 0.05), load before {load0}; "
                    f"durations ms: {' '.join(f'{d:.3f}' for d, _ in ps)}\n# kept: the fastest, the quartiles "
                    "and the slowest\n\n")
            for i in pick:
                f.write(ps[i][1].rstrip() + "\n\n")
        if ps and kind != "other":
            ds = sorted(d for d, _ in ps)
            med = sorted(ps, key=lambda x: x[0])[len(ps) // 2][1]
            with open(os.path.join(OUT, f"explain-{kind}-median.txt"), "w") as f:
                f.write(f"# the median of {len(ps)} plans (durations p50 {ds[len(ds) // 2]:.3f} ms, "
                        f"min {ds[0]:.3f}, max {ds[-1]:.3f})\n\n" + med)
            log(f"   {kind}: {len(ps)} plans, duration p50 {ds[len(ds) // 2]:.3f} ms")


def pct(xs, p):
    xs = sorted(x for x in xs if x >= 0)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, round(p / 100 * len(xs) + 0.5) - 1))
    return xs[k]


# ------------------------------------------------------------------ main


def report(out_dir):
    """`run.py --report DIR`: the table and the breakdown again from a
    run's raw outputs (results.jsonl, statements-*.tsv), e.g. of a run
    stopped before its end."""
    results = []
    with open(os.path.join(out_dir, "results.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            db = f"{r['system']}_{r['mode']}_{r['body_us']}_{r['round']}"
            path = os.path.join(out_dir, f"statements-{db}.tsv")
            if os.path.exists(path):
                with open(path) as g:
                    next(g)
                    r["statements"] = [
                        dict(zip(["calls", "total_ms", "rows", "hit", "read", "dirtied", "wal_records", "wal_fpi",
                                  "wal_bytes", "query"], line.rstrip("\n").split("\t")))
                        for line in g if line.strip()]
            results.append(r)
    ceil = {}
    for system in SYSTEMS:
        xs = [r["runs_per_s"] for r in results if r["system"] == system and r["body_us"] == 0
              and r["mode"] == "ceiling" and not r.get("drained")]
        ceil[system] = statistics.median(xs) if xs else 0
    print(table(results, ceil))
    print(light_table(results))
    print(breakdown(results))
    print(wal_kinds(results))


def main():
    if sys.argv[1:2] == ["--report"]:
        return report(sys.argv[2])
    cluster = Cluster()
    log(f"PostgreSQL {cluster.version} on port {cluster.port} (loopback), data {cluster.data}; raw outputs in {OUT}")
    if PGCONF:
        log(f"extra server settings (PEERS_PGCONF): {'; '.join(PGCONF)}")
    log(f"machine: {os.cpu_count()} CPUs; uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    results = []
    # A first backlog guess; then each system's is sized from its own rate.
    backlog = {"river": 600_000, "graphile": 900_000}
    rate = {}
    combos = [(s, b) for b in BODIES for s in SYSTEMS if s not in ("leasehold_full", "leasehold_limited") or b == 0]
    LAT = [s for s in SYSTEMS if s not in ("leasehold_full", "leasehold_limited")]
    for rnd in range(1, ROUNDS + 1):
        # Alternate: each round starts with the next system.
        order = combos[(rnd - 1) % len(combos):] + combos[:(rnd - 1) % len(combos)]
        for system, body in order:
            size = LEASEHOLD_KEYS if system.startswith("leasehold") else backlog[system]
            r = measure(cluster, system, body, "ceiling", rnd, size)
            results.append(r)
            if not system.startswith("leasehold"):
                best = max(r["runs_per_s"], rate.get(system, 0))
                rate[system] = best
                backlog[system] = max(backlog[system] if r["drained"] else 0,
                                      int(best * (WARMUP + WINDOW + 4) * 1.5), 100_000)
                if r["drained"]:
                    backlog[system] = int(backlog[system] * 2)
    if LATENCY:
        ceil = {}
        for system in LAT:
            xs = [r["runs_per_s"] for r in results
                  if r["system"] == system and r["body_us"] == 0 and not r.get("drained")]
            ceil[system] = statistics.median(xs) if xs else 0
        for system in LAT:
            results.append(measure(cluster, system, 0, "idle", 1, 0, 0, PROBES))
        for system in LAT:
            target = 0.8 * ceil[system]
            if system in ("leasehold", "leasehold_before"):
                # Every runtime registers the same keys: demand = keys × 10/s.
                keys = max(100, int(round(target / 10 / 100)) * 100)
                results.append(measure(cluster, system, 0, "load80", 1, keys, 0, PROBES))
            else:
                feed = max(100, int(round(target / 10 / 100)) * 100)
                results.append(measure(cluster, system, 0, "load80", 1, 0, feed, PROBES))
    if LIGHT:
        for system in [s for s in SYSTEMS if s not in ("leasehold_full", "leasehold_limited")]:
            if system.startswith("leasehold"):
                results.append(measure(cluster, system, 0, "light", 1, LIGHT, 0))
            else:
                results.append(measure(cluster, system, 0, "light", 1, 0, LIGHT))
    if EXPLAIN and "leasehold" in SYSTEMS:
        explain_phase(cluster)
    if PERF:
        perf_reports()
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(table(results, ceil if LATENCY else {}))
    print(light_table(results))
    print(breakdown(results))
    print(wal_kinds(results))
    log(f"done; uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


def fmt_range(xs, f="{:.0f}"):
    xs = sorted(xs)
    if not xs:
        return "—"
    med = statistics.median(xs)
    return f.format(med) + (f" ({f.format(xs[0])}–{f.format(xs[-1])})" if len(xs) > 1 else "")


NAMES = {
    "leasehold": "leasehold (4 runtimes × 16k keys, every 100 ms, defaults, history on)",
    "leasehold_before": "leasehold, the earlier build (PEERS_BEFORE), the same settings",
    "leasehold_full": "leasehold, the same with every key's history ring (100 places) full before it starts",
    "leasehold_limited": "leasehold, the same under a fleet-wide limit that never binds (10,000 places)",
    "river": "River for Rust 0.5.0 (2,000 workers, fetch cooldown 2 ms, poll 20 ms, pool 50), work only",
    "graphile": "graphile-worker 0.18.0, batched (localQueue 500, completeJobBatchDelay 0, useNodeTime), work only",
}


def table(results, ceil):
    rows = ["| system | body | runs/s at its ceiling | client CPU µs/run | server CPU µs/run | WAL records/run "
            "(of which FPI) | WAL bytes/run | trigger → start p50 / p99, idle | at ~80 % load: runs/s, CPU µs/run "
            "client + server, trigger → start p50 / p99 |",
            "|---|---|---|---|---|---|---|---|---|"]
    for system in SYSTEMS:
        for body in BODIES:
            rs = [r for r in results if r["system"] == system and r["body_us"] == body and r["mode"] == "ceiling"
                  and not r.get("drained")]
            if not rs:
                continue
            per = lambda r, k: r[k] * (1e6 if k.endswith("_s") else 1) / max(r["runs"], 1)  # noqa: E731
            idle = load = "—"
            if body == 0:
                for r in results:
                    if r["system"] == system and r["mode"] == "idle" and r.get("probes_us"):
                        p = r["probes_us"]
                        idle = f"{pct(p, 50) / 1000:.1f} / {pct(p, 99) / 1000:.1f} ms" + miss(p)
                    if r["system"] == system and r["mode"] == "load80" and r.get("probes_us"):
                        p = r["probes_us"]
                        load = (f"{r['runs_per_s']:.0f} of {0.8 * ceil.get(system, 0):.0f} aimed, "
                                f"{per(r, 'client_cpu_s'):.1f} + {per(r, 'server_cpu_s'):.1f}, "
                                f"{pct(p, 50) / 1000:.1f} / {pct(p, 99) / 1000:.1f} ms" + miss(p))
            rows.append(
                f"| {NAMES[system]} | {'no-op' if body == 0 else f'{body / 1000:g} ms'} "
                f"| {fmt_range([r['runs_per_s'] for r in rs])} "
                f"| {fmt_range([per(r, 'client_cpu_s') for r in rs], '{:.1f}')} "
                f"| {fmt_range([per(r, 'server_cpu_s') for r in rs], '{:.1f}')} "
                f"| {fmt_range([per(r, 'wal_records') for r in rs], '{:.2f}')} "
                f"({fmt_range([per(r, 'wal_fpi') for r in rs], '{:.3f}')}) "
                f"| {fmt_range([per(r, 'wal_bytes') for r in rs])} | {idle} | {load} |"
            )
    return "\n".join(rows) + "\n\nMedian of the rounds (lowest–highest in brackets); per run = over the window ÷ runs started in it.\n"


def light_table(results):
    """The light-load phase: CPU per run when each batch holds a run or two."""
    rs = [r for r in results if r["mode"] == "light"]
    if not rs:
        return ""
    rows = [f"Light load ({LIGHT} keys or jobs every 100 ms; River's and graphile-worker's CPU includes "
            "their feed's inserts):\n",
            "| system | runs/s | client CPU µs/run | server CPU µs/run | WAL bytes/run |",
            "|---|---|---|---|---|"]
    for r in rs:
        n = max(r["runs"], 1)
        rows.append(f"| {NAMES[r['system']]} | {r['runs_per_s']:.0f} | {r['client_cpu_s'] * 1e6 / n:.1f} "
                    f"| {r['server_cpu_s'] * 1e6 / n:.1f} | {r['wal_bytes'] / n:.0f} |")
    return "\n".join(rows) + "\n"


def miss(p):
    n = sum(1 for x in p if x < 0)
    return f", {len(p)} probes" + (f", {n} not started within 5 s" if n else "")


def breakdown(results):
    return "".join(breakdown_of(results, s)
                   for s in ("leasehold_before", "leasehold", "leasehold_full", "leasehold_limited"))


def breakdown_of(results, system):
    """leasehold's statements in its no-op ceiling windows, per run."""
    rs = [r for r in results if r["system"] == system and r["body_us"] == 0 and r["mode"] == "ceiling"]
    if not rs:
        return ""
    agg = {}
    runs = sum(r["runs"] for r in rs)
    cpu = sum(r["server_cpu_s"] for r in rs)
    for r in rs:
        for s in r["statements"]:
            a = agg.setdefault(s["query"], {"calls": 0, "ms": 0.0, "rows": 0, "wal_records": 0, "wal_bytes": 0,
                                            "hit": 0, "dirtied": 0})
            a["calls"] += int(s["calls"])
            a["ms"] += float(s["total_ms"])
            a["rows"] += int(s["rows"])
            a["wal_records"] += int(s["wal_records"])
            a["wal_bytes"] += int(float(s["wal_bytes"]))
            a["hit"] += int(s["hit"])
            a["dirtied"] += int(s["dirtied"])
    total = sum(a["ms"] for a in agg.values())
    wk = {}
    for r in rs:
        for k, (n, b) in r.get("wal_kinds", {}).items():
            wk.setdefault(k, [0, 0])
            wk[k][0] += n
            wk[k][1] += b
    out = [f"\n{NAMES[system]}, no-op at its ceiling, {len(rs)} windows, {runs} runs: server CPU {cpu * 1e6 / runs:.1f} µs/run, "
           f"statement execution (pg_stat_statements total_exec_time) {total * 1000 / runs:.1f} µs/run\n",
           "| statement | calls per run | rows per call | exec µs per run | share of exec time | mean ms per call "
           "| WAL records per run | WAL bytes per run | buffers hit per run |",
           "|---|---|---|---|---|---|---|---|---|"]
    for q, a in sorted(agg.items(), key=lambda kv: -kv[1]["ms"])[:12]:
        out.append(
            f"| `{q[:110]}{'…' if len(q) > 110 else ''}` | {a['calls'] / runs:.4f} | {a['rows'] / max(a['calls'], 1):.1f} "
            f"| {a['ms'] * 1000 / runs:.1f} | {100 * a['ms'] / total:.1f} % | {a['ms'] / max(a['calls'], 1):.3f} "
            f"| {a['wal_records'] / runs:.2f} | {a['wal_bytes'] / runs:.0f} | {a['hit'] / runs:.1f} |")
    if wk:
        out += ["", f"WAL of the same windows by record type (pg_walinspect; the whole cluster):", "",
                "| record type | records per run | bytes per run |", "|---|---|---|"]
        for k, (n, b) in sorted(wk.items(), key=lambda kv: -kv[1][0])[:12]:
            out.append(f"| {k} | {n / runs:.3f} | {b / runs:.0f} |")
    return "\n".join(out) + "\n"


def wal_kinds(results):
    """Every system's no-op ceiling WAL by record type, per run."""
    out = ["\nWAL by record type, no-op at the ceiling, per run (all windows of each system):\n"]
    for system in SYSTEMS:
        rs = [r for r in results if r["system"] == system and r["body_us"] == 0 and r["mode"] == "ceiling"
              and r.get("wal_kinds") and not r.get("drained")]
        runs = sum(r["runs"] for r in rs)
        if not runs:
            continue
        wk = {}
        for r in rs:
            for k, (n, b) in r["wal_kinds"].items():
                wk.setdefault(k, [0, 0])
                wk[k][0] += n
                wk[k][1] += b
        top = sorted(wk.items(), key=lambda kv: -kv[1][0])[:8]
        out.append(f"- {system}: " + ", ".join(f"{k} {n / runs:.2f} ({b / runs:.0f} B)" for k, (n, b) in top))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    main()
