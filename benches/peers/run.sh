#!/usr/bin/env bash
# The peer benchmark: leasehold, River for Rust and graphile-worker on one
# throwaway PostgreSQL, alternating rounds, one Markdown table on stdout
# (progress on stderr). Method and results: BENCHMARKS.md, "Peers: River and
# graphile-worker, side by side".
#
#   bash benches/peers/run.sh              # the full run (about 15 minutes)
#   PEERS_ROUNDS=1 PEERS_WINDOW=5 bash benches/peers/run.sh   # a short one
#
# Needs: the PostgreSQL server binaries (15 or later, with
# pg_stat_statements), cargo, and Node.js with npm for graphile-worker
# (without node, set PEERS_SYSTEMS=leasehold,river). Everything it starts
# listens on loopback and stops by itself; the cluster is deleted at exit.
# See run.py for the settings (PEERS_* variables).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$here/target}"
echo "building the Rust client (release) in $CARGO_TARGET_DIR" >&2
cargo build --release --locked --manifest-path "$here/Cargo.toml" >&2
if [[ ",${PEERS_SYSTEMS:-graphile}," == *",graphile,"* ]]; then
  echo "installing graphile-worker (npm ci) in $here/graphile" >&2
  (cd "$here/graphile" && npm ci --no-audit --no-fund --loglevel=error >&2)
fi
exec python3 "$here/run.py"
