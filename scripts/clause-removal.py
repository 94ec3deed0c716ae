#!/usr/bin/env python3
"""Clause removal: for each guard clause of the lease SQL (src/lease.rs),
remove it (or, for a rule that forbids something, add the forbidden clause)
in a scratch worktree of HEAD and run the scenario tests named with it
(`lease::` unless a mutation names others); every mutation must make at
least one named test fail.

    python3 scripts/clause-removal.py            # all mutations (~1 min each)
    python3 scripts/clause-removal.py --check    # only check every pattern still matches src/lease.rs

Builds in target/clause-removal (its own target dir), never touches the
working tree. Exits 1 if a mutation is not caught or a pattern is stale.
"""
import os, re, subprocess, sys, tempfile

ROOT = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True).stdout.strip()

mutations = [
 ("claim: re-entrant clause `l.holder = EXCLUDED.holder OR` removed",
  """                 WHERE l.holder = EXCLUDED.holder
                    OR l.expires_at <= clock_timestamp()""",
  """                 WHERE l.expires_at <= clock_timestamp()"""),
 ("claim: expiry clause `OR l.expires_at <= clock_timestamp()` removed",
  """                 WHERE l.holder = EXCLUDED.holder
                    OR l.expires_at <= clock_timestamp()""",
  """                 WHERE l.holder = EXCLUDED.holder"""),
 ("claim: whole WHERE of DO UPDATE removed",
  """                 WHERE l.holder = EXCLUDED.holder
                    OR l.expires_at <= clock_timestamp()""",
  ""),
 ("claim: CASE keeping the fence of a live re-entrant claim removed (always fresh fence)",
  """                       fence       = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > clock_timestamp()
                                          THEN l.fence ELSE EXCLUDED.fence END""",
  """                       fence       = EXCLUDED.fence"""),
 ("claim: CASE condition without the expiry test (same holder keeps fence after expiry)",
  """                       fence       = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > clock_timestamp()
                                          THEN l.fence ELSE EXCLUDED.fence END""",
  """                       fence       = CASE WHEN l.holder = EXCLUDED.holder
                                          THEN l.fence ELSE EXCLUDED.fence END"""),
 ("claim/claim_run: fence from `fence + 1` instead of the sequence",
  "SELECT $1, $2, nextval('leasehold_fence_seq'), clock_timestamp(),",
  "SELECT $1, $2, 1, clock_timestamp(),"),
 ("claim_run: same-holder re-entrance added (a duplicate holder id takes a live lease)",
  """                 WHERE l.expires_at <= clock_timestamp()
                   AND ($4""",
  """                 WHERE (l.holder = EXCLUDED.holder OR l.expires_at <= clock_timestamp())
                   AND ($4""", "lease:: isolation::duplicate_holder"),
 ("claim_run: expiry clause removed",
  """                 WHERE l.expires_at <= clock_timestamp()
                   AND ($4""",
  """                 WHERE true
                   AND ($4"""),
 ("claim_run: due clause removed",
  """                   AND ($4 OR l.next_due_at IS NULL OR l.next_due_at <= clock_timestamp())""",
  ""),
 ("claim_run: fresh fence replaced by keeping the old fence",
  """                       fence       = EXCLUDED.fence,
                       acquired_at = clock_timestamp(),""",
  """                       fence       = CASE WHEN l.holder = EXCLUDED.holder THEN l.fence ELSE EXCLUDED.fence END,
                       acquired_at = clock_timestamp(),"""),
 ("renew: holder clause removed", "         WHERE l.holder = $1\n           AND l.fence = t.fence\n", "         WHERE l.fence = t.fence\n"),
 ("renew: fence clause removed", "           AND l.fence = t.fence\n           AND l.expires_at", "           AND l.expires_at"),
 ("renew: non-expiry clauses removed", "           AND l.expires_at > clock_timestamp()\n", ""),
 ("renew: SKIP LOCKED removed (a locked row stalls the heartbeat)", "FOR UPDATE OF l SKIP LOCKED", "FOR UPDATE OF l",
  "isolation::wedged_heartbeat"),
 ("release: holder clause removed", "             WHERE key = $1\n               AND holder = $2\n               AND fence = $3\";", "             WHERE key = $1\n               AND $2::text IS NOT NULL\n               AND fence = $3\";"),
 ("release: fence clause removed", "             WHERE key = $1\n               AND holder = $2\n               AND fence = $3\";", "             WHERE key = $1\n               AND holder = $2\n               AND $3::int8 IS NOT NULL\";"),
 ("claim_run: times taken from VALUES, before the row-lock wait (the slot bug)",
  """                       acquired_at = clock_timestamp(),
                       expires_at  = clock_timestamp() + make_interval(secs => $3)
                 WHERE l.expires_at <= clock_timestamp()
                   AND ($4""",
  """                       acquired_at = EXCLUDED.acquired_at,
                       expires_at  = EXCLUDED.expires_at
                 WHERE l.expires_at <= clock_timestamp()
                   AND ($4"""),
 ("claim: snapshot pre-check removed",
  """                 WHERE NOT EXISTS (SELECT 1 FROM leasehold_lease c
                                    WHERE c.key = $1 AND c.holder <> $2 AND c.expires_at > clock_timestamp())
""", ""),
]


def main():
    check_only = "--check" in sys.argv
    src = open(os.path.join(ROOT, "src/lease.rs")).read()
    stale = [name for name, old, *_ in mutations if old not in src]
    for name in stale:
        print(f"!! pattern no longer in src/lease.rs: {name}")
    if check_only or stale:
        print(f"{len(mutations) - len(stale)} of {len(mutations)} patterns match")
        return 1 if stale else 0
    uncaught = 0
    with tempfile.TemporaryDirectory() as tmp:
        wt = os.path.join(tmp, "wt")
        subprocess.run(["git", "worktree", "add", "-q", "--detach", wt, "HEAD"], cwd=ROOT, check=True)
        try:
            env = {**os.environ, "CARGO_TARGET_DIR": os.path.join(ROOT, "target/clause-removal"), "RUST_BACKTRACE": "0"}
            base = open(os.path.join(wt, "src/lease.rs")).read()
            for name, old, new, *filters in mutations:
                open(os.path.join(wt, "src/lease.rs"), "w").write(base.replace(old, new))
                names = (filters[0] if filters else "lease::").split()
                r = subprocess.run(["cargo", "test", "-q", "--test", "it", "--", *names], cwd=wt,
                                   capture_output=True, text=True, env=env)
                failed = re.findall(r"^    (\w+::\S+)$", r.stdout, re.M)
                if failed:
                    print(f"{name} -> FAILS: {', '.join(failed)}", flush=True)
                else:
                    uncaught += 1
                    print(f"{name} -> NOT CAUGHT{' (build error)' if 'error[' in r.stderr else ''}", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", wt], cwd=ROOT)
    return 1 if uncaught else 0


if __name__ == "__main__":
    sys.exit(main())
