#!/usr/bin/env bash
# Checks grafana/ against a real Prometheus:
#
#   1. installs Prometheus (Debian package `prometheus`) when `prometheus` or
#      `promtool` is missing — without leaving its service running: only the
#      binaries are used;
#   2. `promtool check rules grafana/alerts.yml`;
#   3. runs `examples/metrics_demo.rs` (three replicas, a throwaway
#      PostgreSQL, a heartbeat error, a lease loss, a fence rejection,
#      failing and panicking runs) serving its metrics on loopback;
#   4. runs Prometheus on loopback with a temporary config that scrapes the
#      demo every second and loads grafana/alerts.yml;
#   5. evaluates every query of grafana/leasehold-dashboard.json (panels and
#      template variables, with the variables substituted) and every alert
#      rule through Prometheus's HTTP API, prints a table of expression →
#      series, and fails on any query that errors or returns no series.
#
# Alert expressions compare against a threshold (`... > 0`), so whether they
# return series depends on what happened. An alert expression that returns
# nothing as a whole is evaluated again in parts without its thresholds:
# each operand of a top-level `and` / `or` / `unless`, with a trailing
# comparison against a number removed. Each part must then return series:
# that proves every metric and label it names exists.
#
# Usage: bash scripts/check-prometheus.sh      (as root, or with sudo)
# Everything runs on 127.0.0.1 and stops by itself; nothing is left behind.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

# How long the demo runs after its scenario before Prometheus is queried.
SETTLE_SECONDS=${SETTLE_SECONDS:-12}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
log() { echo "== $*"; }

work=$(mktemp -d -t leasehold-prom.XXXXXX)
demo_pid=""
prom_pid=""
policy_created=""
cleanup() {
    local status=$?
    if [ -n "$demo_pid" ] && kill -0 "$demo_pid" 2>/dev/null; then
        kill -TERM "$demo_pid" 2>/dev/null || true
        # The demo shuts its replicas down, then its PostgreSQL goes away.
        for _ in $(seq 1 100); do kill -0 "$demo_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$demo_pid" 2>/dev/null || true
    fi
    if [ -n "$prom_pid" ] && kill -0 "$prom_pid" 2>/dev/null; then
        kill -TERM "$prom_pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$prom_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$prom_pid" 2>/dev/null || true
    fi
    if [ -n "$policy_created" ]; then as_root rm -f /usr/sbin/policy-rc.d; fi
    if [ "$status" != 0 ]; then
        for f in "$work"/demo.log "$work"/prometheus.log; do
            [ -f "$f" ] && { echo "--- last lines of $(basename "$f")"; tail -n 40 "$f"; }
        done
    fi
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 1. Prometheus ---------------------------------------------------------
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    log "installing Prometheus (Debian package prometheus)"
    # Keep the package from starting its service (non-systemd machines);
    # on systemd machines it is stopped and disabled right after.
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' | as_root tee /usr/sbin/policy-rc.d >/dev/null
        as_root chmod 755 /usr/sbin/policy-rc.d
        policy_created=1
    fi
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus
    if [ -n "$policy_created" ]; then
        as_root rm -f /usr/sbin/policy-rc.d
        policy_created=""
    fi
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        as_root systemctl disable --now prometheus >/dev/null 2>&1 || true
    fi
fi
prometheus --version 2>&1 | head -n 1

# --- 2. promtool -----------------------------------------------------------
log "promtool check rules grafana/alerts.yml"
promtool check rules grafana/alerts.yml

# --- 3. the demo (built first, so its start-up is not a compilation) --------
log "building examples/metrics_demo.rs"
cargo build --quiet --example metrics_demo
target_dir=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
demo_bin="$target_dir/debug/examples/metrics_demo"
[ -x "$demo_bin" ] || { echo "no demo binary at $demo_bin" >&2; exit 1; }

read -r demo_port prom_port < <(python3 -c '
import socket
a, b = socket.socket(), socket.socket()
a.bind(("127.0.0.1", 0)); b.bind(("127.0.0.1", 0))
print(a.getsockname()[1], b.getsockname()[1])')
prom="http://127.0.0.1:$prom_port"

# --- 4. Prometheus on loopback ---------------------------------------------
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - $ROOT/grafana/alerts.yml
scrape_configs:
  - job_name: leasehold-demo
    static_configs:
      - targets: ["127.0.0.1:$demo_port"]
EOF
log "starting Prometheus on 127.0.0.1:$prom_port"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
    --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$work/prometheus.log" 2>&1 &
prom_pid=$!
for i in $(seq 1 300); do
    curl -sf "$prom/-/ready" >/dev/null 2>&1 && break
    kill -0 "$prom_pid" 2>/dev/null || { echo "Prometheus exited" >&2; exit 1; }
    [ "$i" = 300 ] && { echo "Prometheus not ready after 30 s" >&2; exit 1; }
    sleep 0.1
done

log "starting the metrics demo on 127.0.0.1:$demo_port"
RUST_BACKTRACE=0 "$demo_bin" --addr "127.0.0.1:$demo_port" --seconds 600 >"$work/demo.log" 2>&1 &
demo_pid=$!
for i in $(seq 1 1800); do
    grep -q "scenario done" "$work/demo.log" && break
    kill -0 "$demo_pid" 2>/dev/null || { echo "the metrics demo exited" >&2; exit 1; }
    [ "$i" = 1800 ] && { echo "the metrics demo did not finish its scenario in 180 s" >&2; exit 1; }
    sleep 0.1
done
grep "^metrics_demo:" "$work/demo.log" | sed 's/^/   /'
log "letting Prometheus scrape and evaluate for $SETTLE_SECONDS s"
sleep "$SETTLE_SECONDS"

# --- 5. every query ----------------------------------------------------------
log "evaluating every dashboard and alert query"
PROM="$prom" DASHBOARD="$ROOT/grafana/leasehold-dashboard.json" python3 - <<'PY'
import json
import os
import re
import sys
import urllib.parse
import urllib.request

PROM = os.environ["PROM"]
# Grafana variables: every "All" value, and short windows (the run is short).
VARIABLES = {
    "job": ".*", "instance": ".*", "jobname": ".*",
    "__rate_interval": "30s", "__interval": "5s", "__range": "5m", "__range_s": "300",
}


def api(path, **params):
    url = PROM + path + ("?" + urllib.parse.urlencode(params, doseq=True) if params else "")
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            body = json.load(response)
    except urllib.error.HTTPError as e:
        body = json.load(e)
    if body.get("status") != "success":
        raise RuntimeError(f'{body.get("errorType")}: {body.get("error")}')
    return body["data"]


def query(expr):
    data = api("/api/v1/query", query=expr)
    return 1 if data["resultType"] == "scalar" else len(data["result"])


def substitute(expr):
    def one(m):
        name = m.group(1) or m.group(2)
        if name not in VARIABLES:
            raise RuntimeError(f"unknown variable ${name}")
        return VARIABLES[name]
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", one, expr)


def mask(expr):
    """expr with everything inside (), {}, [] and quotes blanked out, so
    that only top-level operators remain visible (same length)."""
    out, depth, quote = [], 0, None
    for i, c in enumerate(expr):
        if quote:
            out.append("_")
            if c == "\\":
                continue
            if c == quote and expr[i - 1] != "\\":
                quote = None
            continue
        if c in "\"'`":
            quote = c
            out.append("_")
        elif c in "([{":
            depth += 1
            out.append(c if depth == 1 else "_")
        elif c in ")]}":
            depth -= 1
            out.append(c if depth == 0 else "_")
        else:
            out.append(c if depth == 0 else "_")
    return "".join(out)


SET_OP = re.compile(r"\b(and|or|unless)\b(\s+(on|ignoring)\s*\([^)]*\))?")
COMPARISON = re.compile(r"(==|!=|>=|<=|>|<)(\s*bool\b)?")
NUMBER = re.compile(r"^[\s\d.eE+\-*/()]+$")


def unwrap(expr):
    expr = expr.strip()
    while expr.startswith("(") and expr.endswith(")") and mask(expr).count("(") == 1:
        expr = expr[1:-1].strip()
    return expr


def parts(expr):
    """Operands of top-level set operators, each without a trailing
    comparison against a number."""
    expr = unwrap(expr)
    masked = mask(expr)
    cuts = [(m.start(), m.end()) for m in SET_OP.finditer(masked)]
    if cuts:
        pieces, start = [], 0
        for a, b in cuts:
            pieces.append(expr[start:a])
            start = b
        pieces.append(expr[start:])
        return [p for piece in pieces for p in parts(piece)]
    for m in reversed(list(COMPARISON.finditer(masked))):
        if NUMBER.match(expr[m.end():]):
            return [unwrap(expr[: m.start()])]
    return [expr]


def one_line(expr):
    return " ".join(expr.split())


rows, failures = [], []


def check(kind, name, expr, count_fn=query):
    try:
        n = count_fn(expr)
    except Exception as e:  # noqa: BLE001 - report every failure
        rows.append((kind, name, "ERROR", one_line(expr)))
        failures.append(f"{kind} {name}: {one_line(expr)}: {e}")
        return None
    rows.append((kind, name, str(n), one_line(expr)))
    if n == 0:
        failures.append(f"{kind} {name}: no series: {one_line(expr)}")
    return n


# The target is up.
up = api("/api/v1/query", query='up{job="leasehold-demo"}')["result"]
if not up or up[0]["value"][1] != "1":
    sys.exit(f"the demo is not scraped successfully: {up}")

# Dashboard: panel queries and template variables.
dashboard = json.load(open(os.environ["DASHBOARD"]))


def panels(items):
    for p in items:
        yield p
        yield from panels(p.get("panels", []))


n_panel = 0
for panel in panels(dashboard["panels"]):
    for target in panel.get("targets", []):
        n_panel += 1
        check("panel", f'{panel["title"]} [{target["refId"]}]', substitute(target["expr"]))

LABEL_VALUES = re.compile(r"^label_values\((?:(.*),\s*)?(\w+)\)$")
for var in dashboard["templating"]["list"]:
    if var["type"] != "query":
        continue
    definition = var["definition"]
    m = LABEL_VALUES.match(definition.strip())
    if not m:
        failures.append(f"variable {var['name']}: not a label_values() query: {definition}")
        continue
    selector, label = m.group(1), m.group(2)

    def label_values(_expr, selector=selector, label=label):
        params = {"match[]": substitute(selector)} if selector else {}
        return len(api(f"/api/v1/label/{label}/values", **params))

    check("var", var["name"], definition, label_values)

# Alert rules, as Prometheus loaded them.
groups = api("/api/v1/rules")["groups"]
rules = [r for g in groups for r in g["rules"] if r["type"] == "alerting"]
if len(rules) < 5:
    failures.append(f"only {len(rules)} alerting rules loaded from grafana/alerts.yml")
for rule in rules:
    if rule.get("health") not in ("ok", "unknown") or rule.get("lastError"):
        failures.append(f'alert {rule["name"]}: {rule.get("health")}: {rule.get("lastError")}')
    try:
        whole = query(rule["query"])
    except Exception as e:  # noqa: BLE001
        rows.append(("alert", rule["name"], "ERROR", one_line(rule["query"])))
        failures.append(f'alert {rule["name"]}: {e}')
        continue
    rows.append(("alert", rule["name"], str(whole), one_line(rule["query"])))
    if whole == 0:
        for i, part in enumerate(parts(rule["query"]), 1):
            check("  part", f'{rule["name"]} #{i} (no threshold)', part)

width = max(len(r[1]) for r in rows)
print(f'{"kind":<6} {"query":<{width}} {"series":>6}  expression')
for kind, name, n, expr in rows:
    print(f"{kind:<6} {name:<{width}} {n:>6}  {expr}")

states = {a["labels"]["alertname"] + " (" + a["state"] + ")" for a in api("/api/v1/alerts")["alerts"]}
print()
print("alerts pending or firing on the demo: " + (", ".join(sorted(states)) or "none"))
evaluated = sum(1 for r in rows if r[0] != "  part")
print(f"{evaluated} queries evaluated ({n_panel} panel targets, {len(rules)} alert rules, "
      f"{sum(1 for r in rows if r[0] == 'var')} template variables), "
      f"{sum(1 for r in rows if r[0] == '  part')} alert parts without thresholds")
if failures:
    print()
    print("FAILED:")
    for f in failures:
        print("  " + f)
    sys.exit(1)
print("every query returned series")
PY

log "stopping the demo and Prometheus"
# (the EXIT trap does it)
