#!/usr/bin/env bash
# The README's test command. On a fresh machine it first installs what the
# tests need — the PostgreSQL server binaries for the throwaway clusters,
# Chromium and chromedriver for the console's browser test, and PgBouncer
# >= 1.21 for tests/it/pgbouncer.rs — then runs the whole suite.
# Extra arguments go to `cargo test` (e.g. `bash scripts/test.sh lease::`).
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    echo "== installing PostgreSQL server packages"
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql
fi
command -v runuser >/dev/null 2>&1 || as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q util-linux
# The CLI's TLS test (cli/tests/cli/tls.rs) makes its CA and server
# certificate with the openssl command.
if ! command -v openssl >/dev/null 2>&1; then
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssl
fi

# The console's browser test (tests/it/console/browser.rs) drives Debian's
# Chromium through chromedriver; it fails, naming this script, without them.
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    echo "== installing Chromium and chromedriver (the console's browser test)"
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver
fi

echo "== PgBouncer >= 1.21 (Debian 12 ships 1.18, which sqlx cannot use in transaction mode)"
bash scripts/chaos-ci.sh --pgbouncer-only

echo "== cargo test --workspace"
cargo test --workspace "$@"
