#!/usr/bin/env bash
# Regenerates the console's screenshots in docs/console/ (leases.png,
# key.png, job.png, fleet.png; or in the directory given as the first
# argument): runs the console's browser test with LEASEHOLD_SCREENSHOTS set,
# so that it saves the leases, key, job and fleet pages, 1280 px wide, once
# its scenario has passed (the key and job pages with a one-minute
# timeline). Needs what `bash scripts/test.sh` installs (PostgreSQL,
# Chromium, chromedriver); a throwaway PostgreSQL unless DATABASE_URL is set.
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-docs/console}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    echo "console-screenshots: Chromium and chromedriver are missing: run bash scripts/test.sh" \
        "(or apt-get install chromium chromium-driver)" >&2
    exit 1
fi
LEASEHOLD_SCREENSHOTS="$out" cargo test --test it console::browser:: -- --nocapture
ls -l "$out"/leases.png "$out"/key.png "$out"/job.png "$out"/fleet.png
