#!/usr/bin/env bash
# Chaos run for CI (docs/operations.md, "Running the chaos harness"):
#
#   1. makes sure PgBouncer is there for tests/it/pgbouncer.rs: installs the
#      Debian package `pgbouncer` if /usr/sbin/pgbouncer is missing (without
#      leaving its service running: the tests start the binary themselves),
#      and, when that PgBouncer is older than 1.21 (Debian 12 ships 1.18,
#      which cannot serve sqlx's prepared statements in transaction mode),
#      builds PgBouncer 1.24 from Debian's source package into
#      target/pgbouncer/ (about 30 s; kept between runs);
#   2. installs libfaketime (Debian packages `faketime` and `libfaketime`)
#      for the clock faults if it is missing;
#   3. builds the chaos example (dev profile; CHAOS_PROFILE=release to
#      change) and runs it for 60 s with a fixed seed against a throwaway
#      PostgreSQL: 4 replica processes, 12 jobs and the limited job's 4 keys
#      held to 2 runs at once fleet-wide (check 18), every fault kind (seed 6667
#      with a fault every 1-5 s draws each of the 15 kinds at least once,
#      kill-holder, begin-drop, raw-begin, clock-rate and clock-step
#      included, and stop-in-fence three times: a freeze of less than, about
#      and several times a lease),
#      on a primary with an asynchronous streaming standby that is promoted
#      at 30 s (`--standby async`: replication cut for 4-6 periods, the
#      primary crashed, the proxies switched; a few seconds more than
#      without it), then a 20 s quiet tail
#      in which every slot must run exactly once, and a scan for replica
#      backends left idle in transaction. It exits non-zero on any
#      violation, and a check that examined nothing is one: each prints
#      how many items it checked. The one exception is check 8 (calm slots
#      during faults) before 5 minutes of faults: at this density (every
#      1-5 s, every kind) a slot a margin away from every fault that could
#      reach its job comes a couple of times in five minutes, so a 60 s
#      run may have none; the verdict then says "examined nothing, not
#      required" instead of "ok". Longer runs (CHAOS_ARGS below) must
#      have some.
#   4. runs the replica-kill drill (`--drill kill`, about 3.5 min; issue 40):
#      3 replicas, one job every 2 s with a 1 s body, the library's default
#      settings (lease 60 s), `kill -9` of the replica holding the run every
#      9-11 s for 180 s. It fails when more than 2 of its 90 slots were
#      missed, or on any doubled slot, overlapping tenure or stale write.
#      CHAOS_DRILL=0 skips it.
#
# Usage: bash scripts/chaos-ci.sh                  (as root, or with sudo)
#        bash scripts/chaos-ci.sh --pgbouncer-only (step 1 only)
#        CHAOS_ARGS="--duration 600s --seed 7" bash scripts/chaos-ci.sh
# Everything listens on 127.0.0.1 and stops by itself.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

version_ge_1_21() { # "PgBouncer 1.18.0" -> is it >= 1.21?
    local v major minor
    v=$("$1" --version 2>/dev/null | head -1 | awk '{print $2}')
    major=${v%%.*}; minor=${v#*.}; minor=${minor%%.*}
    [ -n "$major" ] && { [ "$major" -gt 1 ] || { [ "$major" -eq 1 ] && [ "$minor" -ge 21 ]; }; }
}

install_pgbouncer() {
    if [ ! -x /usr/sbin/pgbouncer ]; then
        echo "== installing PgBouncer (Debian package)"
        as_root apt-get update -q
        # Where the package's postinst starts the service, stop it again.
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends pgbouncer
        if command -v service >/dev/null 2>&1; then as_root service pgbouncer stop >/dev/null 2>&1 || true; fi
    fi
    echo "== $(/usr/sbin/pgbouncer --version | head -1) at /usr/sbin/pgbouncer"
    local built="$ROOT/target/pgbouncer/bin/pgbouncer"
    if version_ge_1_21 /usr/sbin/pgbouncer; then return; fi
    if [ -x "$built" ] && version_ge_1_21 "$built"; then
        echo "== using $("$built" --version | head -1) at $built"
        return
    fi
    echo "== PgBouncer < 1.21 cannot track sqlx's prepared statements in transaction mode;"
    echo "   building PgBouncer 1.24 from Debian's source package into target/pgbouncer/"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        libevent-dev libssl-dev pkg-config make gcc >/dev/null
    local work
    work=$(mktemp -d)
    chmod 755 "$work" # apt drops privileges to _apt for downloads
    mkdir -p "$work/lists/partial"
    echo "deb-src http://deb.debian.org/debian trixie main" >"$work/sources.list"
    local apt=(-o "Dir::Etc::sourcelist=$work/sources.list" -o "Dir::Etc::sourceparts=/nonexistent"
        -o "Dir::State::Lists=$work/lists")
    # A private package list: the machine's apt sources are not touched.
    apt-get "${apt[@]}" update -q >/dev/null
    (cd "$work" && apt-get "${apt[@]}" source --download-only pgbouncer >/dev/null 2>&1)
    tar -xzf "$work"/pgbouncer_*.orig.tar.gz -C "$work"
    (
        cd "$work"/pgbouncer-*/
        ./configure --prefix="$ROOT/target/pgbouncer" --without-cares --without-systemd --without-pam \
            --with-openssl >"$work/configure.log" 2>&1 || { tail -20 "$work/configure.log"; exit 1; }
        make -j"$(nproc)" >"$work/make.log" 2>&1 || { tail -20 "$work/make.log"; exit 1; }
        mkdir -p "$ROOT/target/pgbouncer/bin"
        cp pgbouncer "$ROOT/target/pgbouncer/bin/pgbouncer"
    )
    rm -rf "$work"
    echo "== built $("$built" --version | head -1) at $built"
}

install_pgbouncer
if [ "${1:-}" = "--pgbouncer-only" ]; then exit 0; fi

# PostgreSQL server binaries for the throwaway cluster.
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    echo "== installing PostgreSQL server packages"
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql
fi

# libfaketime for the clock faults (examples/chaos/clock.rs): a replica
# whose clock runs ×0.95 / ×1.05, or whose wall clock is stepped. Debian 12
# ships 0.9.10. Without it the harness skips those faults and says so.
if ! ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1; then
    echo "== installing libfaketime (the chaos harness's clock faults)"
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends faketime libfaketime
fi

# The dev profile by default: after `cargo test` its dependencies are already
# built, while a release build would compile them all again (minutes on two
# cores). The replicas spend their time waiting on timers and the database,
# so the profile does not change what the run can find. CHAOS_PROFILE=release
# for long runs.
profile=${CHAOS_PROFILE:-dev}
echo "== building the chaos harness ($profile profile)"
cargo build --profile "$profile" --example chaos
dir=debug; [ "$profile" = dev ] || dir=$profile
echo "== chaos run"
# shellcheck disable=SC2086 # CHAOS_ARGS is a list of flags
"${CARGO_TARGET_DIR:-target}/$dir/examples/chaos" --replicas 4 --jobs 12 --duration 60s --seed 6667 --gap 1s..5s \
    --limited-jobs 4 --fleet-limit 2 --standby async --out target/chaos-ci ${CHAOS_ARGS:-}
if [ "${CHAOS_DRILL:-1}" != 0 ]; then
    echo "== replica-kill drill"
    "${CARGO_TARGET_DIR:-target}/$dir/examples/chaos" --drill kill --seed 42 --out target/chaos-drill
fi
