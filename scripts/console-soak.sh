#!/usr/bin/env bash
# Soak `leasehold console` under a slowloris attack and a flood of page
# views (examples/console_soak.rs): a throwaway PostgreSQL, the release
# CLI on loopback, N slowloris connections (headers a byte at a time),
# clients viewing pages back to back, and every second a normal client
# timing its answer while the console's descriptors, connections and RSS
# are sampled. Stops by itself; exits 1 if a probe took over 1 s or
# failed, or descriptors or RSS kept growing.
#
#   scripts/console-soak.sh            # 10 minutes, 2,000 slowloris, 8 flooding clients
#   scripts/console-soak.sh --short    # 20 s, 600 slowloris, 4 flooding clients (CI-sized)
#   scripts/console-soak.sh --secs 120 --slow 5000 --flood 16
#
# Needs the PostgreSQL binaries (or DATABASE_URL) like the tests, and a
# file descriptor limit above the slowloris count plus ~100 (the client
# holds one per connection): `ulimit -n 20000`.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
args=(--secs 600 --slow 2000 --flood 8)
if [[ "${1:-}" == "--short" ]]; then
    shift
    args=(--secs 20 --slow 600 --flood 4)
fi
# The console under test in release; the load generator in the dev
# profile (its dev-dependencies are the tests', already built there).
cargo build --release -p leasehold-cli --bin leasehold
cargo build --example console_soak
exec "$target/debug/examples/console_soak" --cli "$target/release/leasehold" "${args[@]}" "$@"
