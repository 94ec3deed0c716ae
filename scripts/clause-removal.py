#!/usr/bin/env python3
"""Clause removal: for each guard clause of the lease SQL (src/lease/mod.rs,
the scheduler's batch statements and the run history in src/lease/batch.rs,
the fence SQL in src/lease/fence.rs, the operator's revoke in
src/lease/revoke.rs; pause, resume and trigger in control.rs, the pause
rule enforced by mod.rs's and batch.rs's claims, written once in
pause_rule.rs and expanded at each call site;
what operators read and the record of their actions in history.rs,
recent.rs, fleet.rs and audit.rs; the stored keys of job kinds in keys.rs;
the commit check on fenced transactions in
migrations/0005_fence_tenure.sql; the fence jump on a new timeline in
migrations/0006_fence_timeline.sql),
remove it (or, for a rule that forbids something, add the forbidden clause)
in a scratch worktree of HEAD and run the scenario tests named with it
(`lease::` unless a mutation names others); every mutation must make at
least one named test fail.

    python3 scripts/clause-removal.py            # all mutations (~1 min each)
    python3 scripts/clause-removal.py finish_many claim_due   # only mutations whose name contains one of these
    python3 scripts/clause-removal.py --check    # only check every pattern still matches its file

Builds in target/clause-removal (its own target dir), never touches the
working tree. Exits 1 if a mutation is not caught or a pattern is stale.
"""
import os, re, subprocess, sys, tempfile

ROOT = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True).stdout.strip()

# (name, pattern, replacement[, tests]) in src/lease/mod.rs.
mutations = [
 ("release: holder clause removed",
  "             WHERE l.key = $1 AND l.holder = $2 AND l.fence = $3\n               FOR UPDATE SKIP LOCKED",
  "             WHERE l.key = $1 AND l.fence = $3\n               FOR UPDATE SKIP LOCKED",
  "lease::late_release_after_takeover_leaves_the_new_holder"),
 ("release: fence clause removed",
  "             WHERE l.key = $1 AND l.holder = $2 AND l.fence = $3\n               FOR UPDATE SKIP LOCKED",
  "             WHERE l.key = $1 AND l.holder = $2\n               FOR UPDATE SKIP LOCKED",
  "lease::late_release_of_an_old_run_leaves_the_new_run"),
 ("claim: re-entrant clause `l.holder = EXCLUDED.holder OR` removed",
  """                 WHERE (l.holder = EXCLUDED.holder
                        OR l.expires_at <= clock_timestamp())""",
  """                 WHERE (l.expires_at <= clock_timestamp())"""),
 ("claim: expiry clause `OR l.expires_at <= clock_timestamp()` removed",
  """                 WHERE (l.holder = EXCLUDED.holder
                        OR l.expires_at <= clock_timestamp())""",
  """                 WHERE (l.holder = EXCLUDED.holder)"""),
 ("claim: whole WHERE of DO UPDATE removed",
  """                 WHERE (l.holder = EXCLUDED.holder
                        OR l.expires_at <= clock_timestamp())
                   AND NOT""",
  """                 WHERE NOT"""),
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
  "SELECT $1, $2, leasehold_next_fence(), clock_timestamp(),",
  "SELECT $1, $2, 1, clock_timestamp(),"),
 ("claim_run: same-holder re-entrance added (a duplicate holder id takes a live lease)",
  """                 WHERE l.expires_at <= clock_timestamp()
                   AND ($4""",
  """                 WHERE (l.holder = EXCLUDED.holder OR l.expires_at <= clock_timestamp())
                   AND ($4""", "lease::"),
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
 ("claim_run: times taken from VALUES, before the row-lock wait (the slot bug)",
  """                       acquired_at = clock_timestamp(),
                       expires_at  = clock_timestamp() + make_interval(secs => $3),
                       runs        = l.runs + 1,""",
  """                       acquired_at = EXCLUDED.acquired_at,
                       expires_at  = EXCLUDED.expires_at,
                       runs        = l.runs + 1,"""),
 ("claim: snapshot pre-check removed",
  """                 WHERE NOT EXISTS (SELECT 1 FROM leasehold_lease c
                                    WHERE c.key = $1 AND c.holder <> $2 AND c.expires_at > clock_timestamp())
""", """                 WHERE true
"""),
 ("claim: pause clause removed (a paused job's key is taken over)",
  """                        OR l.expires_at <= clock_timestamp())
                   AND NOT ",
            paused!(key = "l.key", jobs = "l.job_name"),""",
  """                        OR l.expires_at <= clock_timestamp())
                   AND NOT ",
            "false",""",
  "operators::pause"),
 ("claim/claim_run: key-pause clause of the insert path removed (a paused key without a row is created)",
  'paused!(key = "$1", jobs = "NULL")',
  '"false"', "operators::pause"),
 ("claim_run: pause clause removed (a paused job's key is claimed for a run)",
  """                   AND ($4 OR l.next_due_at IS NULL OR l.next_due_at <= clock_timestamp())
                   AND NOT ",
            paused!(key = "l.key", jobs = "l.job_name"),""",
  """                   AND ($4 OR l.next_due_at IS NULL OR l.next_due_at <= clock_timestamp())
                   AND NOT ",
            "false",""",
  "operators::pause"),
 ("renew: pause-with-cancel never reported (a cancelling pause lets the run go on)",
  'paused!(cancelling, key = "r.key", jobs = "r.job_name")',
  '"false"',
  "operators::pause::a_pause_lets_the_run_finish_unless_it_cancels_it"),
 ("renew: cancel flag ignored (every pause cancels the run in progress)",
  'paused!(cancelling, key = "r.key", jobs = "r.job_name")',
  'paused!(key = "r.key", jobs = "r.job_name")',
  "operators::pause::a_pause_lets_the_run_finish_unless_it_cancels_it"),
]

# The same, in src/lease/batch.rs (the scheduler's statements).
batch_mutations = [
 ("claim_due: expiry clause removed (a batch takes a live lease)",
  "                 WHERE l.expires_at <= clock_timestamp()\n                   AND (l.next_due_at IS NULL",
  "                 WHERE true\n                   AND (l.next_due_at IS NULL",
  "scheduler::batch_claim::a_batch_claim_never_takes_a_live_lease"),
 ("claim_due: due clause removed (a key runs again in its slot)",
  "                   AND (l.next_due_at IS NULL OR l.next_due_at <= clock_timestamp())\n                   AND NOT \",",
  "\n                   AND NOT \",",
  "scheduler::batch_claim runtime::three_replicas_run_a_job_once_per_slot"),
 ("claim_due: SKIP LOCKED removed (a locked row holds up the batch)",
  "                 LIMIT $4\n                   FOR UPDATE OF l SKIP LOCKED",
  "                 LIMIT $4\n                   FOR UPDATE OF l",
  "scheduler::batch_claim::a_locked_row_does_not_hold_up_the_other_keys_of_a_batch"),
 ("claim_due: fence drawn straight from the sequence (no timeline check)",
  "                       fence       = leasehold_next_fence(),",
  "                       fence       = nextval('leasehold_fence_seq'),",
  "failover::an_asynchronous_failover"),
 ("claim_due: fresh fence replaced by the row's old fence",
  "                       fence       = leasehold_next_fence(),",
  "                       fence       = l.fence,",
  "scheduler::batch_claim runtime::three_replicas_run_a_job_once_per_slot"),
 ("claim_due: same-holder re-entrance added (a duplicate holder id takes a live lease)",
  "                 WHERE l.expires_at <= clock_timestamp()\n                   AND (l.next_due_at IS NULL",
  "                 WHERE (l.holder = $1 OR l.expires_at <= clock_timestamp())\n                   AND (l.next_due_at IS NULL",
  "isolation::duplicate_holder"),
 ("claim_due: LIMIT removed (a full replica claims beyond its room)",
  "                 LIMIT $4\n", "                 LIMIT $4 + 100\n",
  "scheduler::concurrency_limit"),
 ("finish_many: holder clause removed",
  "                 WHERE l.holder = t.holder\n                   AND l.fence = t.fence\n                   FOR UPDATE",
  "                 WHERE l.fence = t.fence\n                   FOR UPDATE",
  "lease:: scheduler::"),
 ("finish_many: fence clause removed",
  "                 WHERE l.holder = t.holder\n                   AND l.fence = t.fence\n                   FOR UPDATE",
  "                 WHERE l.holder = t.holder\n                   FOR UPDATE",
  "lease::"),
 ("finish_many: SKIP LOCKED removed (a locked row holds up every release of the batch)",
  "                   AND l.fence = t.fence\n                   FOR UPDATE OF l SKIP LOCKED",
  "                   AND l.fence = t.fence\n                   FOR UPDATE OF l",
  "scheduler::batch_claim::a_release_meeting_a_locked_row_does_not_hold_up_the_others"),
 ("register_many: an existing row's schedule reset at every start",
  "                 WHERE NOT EXISTS (SELECT 1 FROM existing AS e WHERE e.key = t.key)\n                ON CONFLICT (key) DO NOTHING\n                RETURNING key, expires_at, next_due_at",
  "                ON CONFLICT (key) DO UPDATE SET next_due_at = EXCLUDED.next_due_at\n                RETURNING key, expires_at, next_due_at",
  "runtime:: scheduler::"),
 ("forget: expiry clause removed (a live lease is deleted)",
  "DELETE FROM leasehold_lease WHERE key = $1 AND expires_at <= clock_timestamp() RETURNING key",
  "DELETE FROM leasehold_lease WHERE key = $1 RETURNING key",
  "scheduler::forget"),
 ("claim_due: pause clause removed (a paused key runs)",
  '                   AND NOT ",\n            paused!(key = "l.key", jobs = "l.job_name, t.job"),',
  '                   AND NOT ",\n            "false",',
  "operators::pause"),
 ("claim_due: job clause of the pause removed (a paused job's keys run)",
  '                   AND NOT ",\n            paused!(key = "l.key", jobs = "l.job_name, t.job"),',
  '                   AND NOT ",\n            paused!(key = "l.key", jobs = "NULL"),',
  "operators::pause::a_paused_job_pauses_all_its_keys_and_nothing_else"),
 ("finish_many: history ring overwrites a newer run with a late older one",
  "                 WHERE r.run_no < EXCLUDED.run_no\n",
  "\n",
  "operators::history"),
 ("finish_many: retry forgets the slot owed (catch-up loses a failed slot)",
  "                       slot_at     = COALESCE(t.at, l.slot_at, l.next_due_at)\n",
  "                       slot_at     = COALESCE(t.at, clock_timestamp() + make_interval(secs => t.after), l.slot_at)\n",
  "operators::catch_up"),
 ("finish_many: a trigger during the run overwritten by the release (the operator's trigger is lost)",
  "                                          WHEN l.next_due_at > l.acquired_at THEN clock_timestamp()\n",
  "",
  "operators::trigger"),
 ("finish_many: a plain release takes a due time not reached yet for a trigger (a key claimed early is due at once)",
  "                       next_due_at = CASE WHEN t.at IS NULL AND t.after IS NULL THEN l.next_due_at\n",
  "                       next_due_at = CASE\n",
  "lease::a_plain_release_keeps_a_due_time_not_reached_yet"),
 ("readd: a key a replica claimed since its removal is reset (the slots it owes are lost)",
  "               AND l.acquired_at <= clock_timestamp() - make_interval(secs => $4)\n",
  "\n",
  "scheduler::membership"),
 ("readd: a key running elsewhere is reset (its release takes the reset for a trigger: one run too many)",
  "               AND l.expires_at <= clock_timestamp()\n               AND NOT \",",
  "               AND NOT \",",
  "scheduler::membership"),
 ("readd: a paused key is reset (the slots owed to its resume are lost)",
  'paused!(key = "l.key", jobs = "l.job_name, $3")',
  '"false"',
  "scheduler::membership"),
 ("forget: history kept after the row is deleted (a re-added key's ring refuses its runs)",
  "                DELETE FROM leasehold_run WHERE key IN (SELECT key FROM gone)\n",
  "                SELECT 1\n",
  "operators::history scheduler::forget"),
]

# The fence SQL (src/lease/fence.rs): the downstream half of the lease.
fence_mutations = [
 ("fence advance: guard clause removed (a stale run's transaction goes through)",
  "updated_at = clock_timestamp()\n         WHERE f.last_fence <= EXCLUDED.last_fence\n",
  "updated_at = clock_timestamp()\n",
  "fenced:: operators::revoke"),
 ("fence advance: tenure-live check removed (a run resumed after its lease begins a fenced transaction)",
  "               AND l.expires_at > clock_timestamp()\n        )\n        INSERT INTO leasehold_fence",
  "\n        )\n        INSERT INTO leasehold_fence",
  "frozen_holder::commit_check"),
 ("fence advance: idle bound not set (a frozen holder keeps the fence row locked while it is stopped)",
  "            SELECT set_config('idle_in_transaction_session_timeout',",
  "            SELECT 1, ('idle_in_transaction_session_timeout',",
  "frozen_holder::idle_bound"),
 ("fence advance: the service's shorter idle timeout overridden by the lease",
  "                              LEAST(NULLIF(extract(epoch FROM",
  "                              GREATEST(NULLIF(extract(epoch FROM",
  "frozen_holder::idle_bound::a_shorter_idle_timeout_of_the_service_is_kept"),
 ("fence advance: `<=` made `<` (a run's second fenced transaction is refused)",
  "         WHERE f.last_fence <= EXCLUDED.last_fence\n",
  "         WHERE f.last_fence < EXCLUDED.last_fence\n",
  "fenced::"),
 ("fenced update: fence clause removed (a stale run overwrites a newer run's row)",
  "WHERE {filter_sql}last_fence <= ${fence}",
  "WHERE {filter_sql}true",
  "fenced::"),
 ("fenced update: tenure check removed (a run resumed after its lease updates a row no newer run wrote)",
  "             AND l.expires_at > clock_timestamp())\",",
  ")\",",
  "frozen_holder::commit_check"),
 ("fenced update: `<=` made `<` (a run cannot write its own row twice)",
  "WHERE {filter_sql}last_fence <= ${fence}",
  "WHERE {filter_sql}last_fence < ${fence}",
  "fenced::"),
]

# An operator's revoke (src/lease/revoke.rs): `leasehold release [--force]`.
revoke_mutations = [
 ("revoke: force clause removed (a held lease is revoked without --force)",
  "                   AND ($2 OR old.expires_at <= clock_timestamp())\n", "\n",
  "operators::revoke"),
 ("revoke: the old fence kept (the revoked run still writes through the fence)",
  "                   SET fence = leasehold_next_fence(),\n",
  "                   SET fence = l.fence,\n",
  "operators::revoke"),
 ("revoke: a held lease not expired (no other replica can claim it)",
  "                       expires_at = LEAST(l.expires_at,\n",
  "                       expires_at = GREATEST(l.expires_at,\n",
  "operators::revoke"),
 ("revoke: fence rows not raised (the revoked run writes until a newer run does)",
  "                SELECT r, ended.fence FROM ended CROSS JOIN unnest($3::text[]) AS r\n",
  "                SELECT r, ended.fence FROM ended CROSS JOIN unnest($3::text[]) AS r WHERE false\n",
  "operators::revoke"),
 ("revoke: a fence row lowered (GREATEST removed)",
  "                   SET last_fence = GREATEST(f.last_fence, EXCLUDED.last_fence), updated_at = clock_timestamp(),\n",
  "                   SET last_fence = EXCLUDED.last_fence, updated_at = clock_timestamp(),\n",
  "operators::revoke"),
 ("revoke: the tenure's key kept on raised rows (the commit check refuses the operator's revoke)",
  "updated_at = clock_timestamp(),\n                       lease_key = NULL\n",
  "updated_at = clock_timestamp()\n",
  "operators::revoke"),
]

# The commit check on fenced transactions (migrations/0005_fence_tenure.sql,
# F5): a deferred trigger, applied by migrate() to every test database.
commit_check_mutations = [
 ("commit check: expiry clause removed (a commit after the lease expired lands)",
  "        AND l.fence = NEW.last_fence\n        -- still live on the server clock, read at COMMIT\n        AND l.expires_at > clock_timestamp();",
  "        AND l.fence = NEW.last_fence;",
  "frozen_holder::commit_check"),
 ("commit check: fence clause removed (a commit after another replica took the key lands)",
  "        AND l.fence = NEW.last_fence\n",
  "\n",
  "frozen_holder::commit_check"),
 ("commit check: run at the advance instead of at COMMIT",
  "    DEFERRABLE INITIALLY DEFERRED\n",
  "    NOT DEFERRABLE\n",
  "frozen_holder::commit_check"),
]

# Fences across a promotion (migrations/0006_fence_timeline.sql, invariant
# 4): the sequence jumps on the first fence drawn on a new timeline.
timeline_mutations = [
 ("fence timeline: the jump removed (a promoted standby repeats the lost window's fences)",
  "    PERFORM setval('leasehold_fence_seq', to_value);\n",
  "\n",
  "failover::an_asynchronous_failover"),
 ("fence timeline: the session never checks the timeline",
  "    SELECT CASE WHEN current_setting('leasehold.fence_timeline', true) <> ''\n",
  "    SELECT CASE WHEN true\n",
  "failover::an_asynchronous_failover failover::a_database_on_another_timeline"),
 ("fence timeline: the recorded-timeline guard removed (every racing session jumps)",
  "    ON CONFLICT (one) DO UPDATE SET timeline = tl, changed_at = clock_timestamp()\n     WHERE t.timeline <> tl;\n",
  "    ON CONFLICT (one) DO UPDATE SET timeline = tl, changed_at = clock_timestamp();\n",
  "failover::a_database_on_another_timeline"),
]

# The operators' controls (src/lease/control.rs): pause, resume, trigger.
# (The pause rule itself is enforced by the claims: see the pause
# mutations above.)
control_mutations = [
 ("pause: a second pause without cancel downgrades a pause with cancel",
  "ON CONFLICT (scope, name) DO UPDATE SET cancel = p.cancel OR EXCLUDED.cancel",
  "ON CONFLICT (scope, name) DO UPDATE SET cancel = EXCLUDED.cancel",
  "operators::resume"),
 ("resume: keys not yet due are made due too (a resume runs every key at once)",
  "                   AND COALESCE(l.next_due_at, '-infinity') <= clock_timestamp()\n",
  "\n",
  "operators::resume operators::pause"),
 ("resume: a running key is woken (its release takes the resume for a trigger: one run too many)",
  "                   AND l.expires_at <= clock_timestamp()\n                RETURNING l.key",
  "                RETURNING l.key",
  "operators::resume"),
 ("resume: the target clause removed (resuming one key wakes every key)",
  'pause_covers!(pause = "gone", key = "l.key", jobs = "l.job_name")',
  '"true"',
  "operators::resume operators::pause"),
]

# What operators read and the record of what they did (src/lease/history.rs,
# recent.rs, fleet.rs, audit.rs): the console and the CLI act on what these say, so a
# paused key reported as held, or a registration reported as a live replica,
# misleads an operator into the wrong action.
read_mutations = [
 ("list_page: a paused key that is held reads as held too",
  "                OR ($4 = 'held' AND NOT s.paused AND s.expires_at > s.server_now)\n",
  "                OR ($4 = 'held' AND s.expires_at > s.server_now)\n",
  "console::pages"),
 ("list_page: the page cursor ignored (every page is the first)",
  "                   AND ($3::text IS NULL OR l.key > $3)\n",
  "\n",
  "console::pages"),
]
recent_mutations = [
 ("recent_runs: the key clause removed (a key's strip shows other keys' runs)",
  "                    WHERE run.key = k.key\n",
  "                    WHERE true\n",
  "console::timeline"),
 ("recent_runs: the since clause removed (a window reads runs that ended before it)",
  "                      AND ($2::timestamptz IS NULL OR run.ended_at >= $2)\n",
  "\n",
  "console::timeline::recent_runs"),
]
fleet_mutations = [
 ("fleet: a never-claimed registration row counts as a tenure",
  "               AND l.expires_at - l.acquired_at > interval '1 microsecond'",
  "",
  "console::pages"),
]
audit_mutations = [
 ("actions: a job's actions left out of its keys' history",
  "                OR (scope = 'job' AND name = (SELECT job_name FROM leasehold_lease WHERE key = $1))\n",
  "\n",
  "operators::audit"),
 ("job_actions: its keys' actions left out (their releases unmarked)",
  "                OR (scope = 'key' AND name IN (SELECT key FROM leasehold_lease WHERE job_name = $1))\n",
  "\n",
  "console::timeline::a_jobs_page"),
 ("job_actions: every key's actions taken for the job's",
  "name IN (SELECT key FROM leasehold_lease WHERE job_name = $1))",
  "name IN (SELECT key FROM leasehold_lease))",
  "console::timeline::a_jobs_page"),
 ("job_actions: every job's actions taken for the job's",
  "             WHERE (scope = 'job' AND name = $1)\n",
  "             WHERE (scope = 'job')\n",
  "console::timeline::a_jobs_page"),
]

# The stored keys of job kinds (src/lease/keys.rs).
keys_mutations = [
 ("keys: update_key rewrites a key of another kind",
  "                 WHERE key = $1 AND kind = $2\n                RETURNING kind, version",
  "                 WHERE key = $1\n                RETURNING kind, version",
  "fleet::clauses::an_update_or_removal_of_another_kind_changes_nothing"),
 ("keys: remove_key deletes a key of another kind",
  "DELETE FROM leasehold_key WHERE key = $1 AND kind = $2 RETURNING kind",
  "DELETE FROM leasehold_key WHERE key = $1 RETURNING kind",
  "fleet::clauses::an_update_or_removal_of_another_kind_changes_nothing"),
 ("keys: update_key keeps the old version's reported problem",
  "                       args_error = NULL, updated_at = clock_timestamp()",
  "                       updated_at = clock_timestamp()",
  "fleet::arguments::an_undeserializable_key_is_reported_and_never_run"),
 ("keys: add_keys does not move the kind's generation (running replicas never see the key)",
  "ON CONFLICT (kind) DO UPDATE SET generation = k.generation + 1, keys = k.keys + excluded.keys",
  "ON CONFLICT (kind) DO UPDATE SET keys = k.keys + excluded.keys",
  "fleet::handover::a_key_added_through_a_runs_on_b_when_a_is_gone"),
 ("keys: add_keys does not count the keys of an existing kind",
  "ON CONFLICT (kind) DO UPDATE SET generation = k.generation + 1, keys = k.keys + excluded.keys",
  "ON CONFLICT (kind) DO UPDATE SET generation = k.generation + 1",
  "fleet::clauses::an_update_or_removal_of_another_kind_changes_nothing"),
 ("keys: update_key does not move the kind's generation",
  "                UPDATE leasehold_kind AS k SET generation = k.generation + 1\n                  FROM updated",
  "                UPDATE leasehold_kind AS k SET generation = k.generation\n                  FROM updated",
  "fleet::clauses::a_new_schedule_reaches_a_running_replica"),
 ("keys: remove_key does not move the kind's generation (running replicas go on running it)",
  "SET generation = k.generation + 1, keys = k.keys - 1",
  "SET keys = k.keys - 1",
  "fleet::handover::a_key_removed_through_b_stops_on_a_within_one_poll"),
 ("keys: remove_key does not count the key removed",
  "SET generation = k.generation + 1, keys = k.keys - 1",
  "SET generation = k.generation + 1",
  "fleet::clauses::an_update_or_removal_of_another_kind_changes_nothing"),
 ("keys: a report about an old version marks the new one",
  "             WHERE key = $1 AND version = $2 AND args_error IS DISTINCT FROM $3",
  "             WHERE key = $1 AND args_error IS DISTINCT FROM $3",
  "fleet::clauses::a_report_about_an_old_version_leaves_the_new_one_clear"),
 ("keys: a new schedule postpones a due run",
  "             WHERE key = $1 AND (next_due_at IS NULL OR next_due_at > $2)",
  "             WHERE key = $1",
  "fleet::clauses::a_new_schedule_never_postpones_a_due_run"),
]

# The pause rule itself (src/lease/pause_rule.rs), which every statement
# above expands: each half of it removed for all of them at once. The
# mutations above remove it from one statement at a time, at its call site.
pause_rule_mutations = [
 ("pause rule: the job half removed (a job pause covers none of its keys)",
  '".scope = \'job\' AND "', '".scope = \'job\' AND false AND "',
  "operators::pause::a_paused_job_pauses_all_its_keys_and_nothing_else"),
 ("pause rule: the key half removed (a key pause covers nothing)",
  '".scope = \'key\' AND "', '".scope = \'key\' AND false AND "',
  "operators::pause"),
]

FILES = [("src/lease/mod.rs", mutations), ("src/lease/control.rs", control_mutations), ("src/lease/batch.rs", batch_mutations),
         ("src/lease/fence.rs", fence_mutations), ("src/lease/revoke.rs", revoke_mutations),
         ("src/lease/history.rs", read_mutations),
         ("src/lease/recent.rs", recent_mutations), ("src/lease/fleet.rs", fleet_mutations),
         ("src/lease/audit.rs", audit_mutations),
         ("src/lease/keys.rs", keys_mutations), ("src/lease/pause_rule.rs", pause_rule_mutations),
         ("migrations/0005_fence_tenure.sql", commit_check_mutations),
         ("migrations/0006_fence_timeline.sql", timeline_mutations)]


def main():
    check_only = "--check" in sys.argv
    stale = []
    for path, muts in FILES:
        src = open(os.path.join(ROOT, path)).read()
        for name, old, *_ in muts:
            if old not in src:
                stale.append(name)
                print(f"!! pattern no longer in {path}: {name}")
    total = sum(len(m) for _, m in FILES)
    if check_only or stale:
        print(f"{total - len(stale)} of {total} patterns match")
        return 1 if stale else 0
    only = [a for a in sys.argv[1:] if not a.startswith("-")]
    uncaught = 0
    with tempfile.TemporaryDirectory() as tmp:
        wt = os.path.join(tmp, "wt")
        subprocess.run(["git", "worktree", "add", "-q", "--detach", wt, "HEAD"], cwd=ROOT, check=True)
        try:
            env = {**os.environ, "CARGO_TARGET_DIR": os.path.join(ROOT, "target/clause-removal"), "RUST_BACKTRACE": "0"}
            # Unmutated, every scenario named below must pass: otherwise a
            # failing scenario would count every mutation as caught.
            baseline = sorted({n for _, muts in FILES for name, _, _, *f in muts
                               if not only or any(o in name for o in only)
                               for n in (f[0] if f else "lease::").split()})
            r = subprocess.run(["cargo", "test", "-q", "--test", "it", "--", *baseline], cwd=wt,
                               capture_output=True, text=True, env=env)
            if r.returncode != 0:
                failed = re.findall(r"^    (\w+::\S+)$", r.stdout, re.M)
                print(f"!! unmutated, these scenarios already fail: {', '.join(failed) or r.stderr[-2000:]}")
                # What each one said, so a failure here can be diagnosed
                # from the CI log alone.
                for panic in re.findall(r"^thread '.*' .*panicked at .*\n(?:.*\n){0,6}", r.stdout + r.stderr, re.M):
                    print(panic.rstrip())
                return 1
            print(f"baseline: the {len(baseline)} scenario filters pass unmutated", flush=True)
            for path, muts in FILES:
                base = open(os.path.join(wt, path)).read()
                for name, old, new, *filters in muts:
                    if only and not any(o in name for o in only):
                        continue
                    open(os.path.join(wt, path), "w").write(base.replace(old, new))
                    names = (filters[0] if filters else "lease::").split()
                    r = subprocess.run(["cargo", "test", "-q", "--test", "it", "--", *names], cwd=wt,
                                       capture_output=True, text=True, env=env)
                    failed = re.findall(r"^    (\w+::\S+)$", r.stdout, re.M)
                    if "syntax error at or near" in r.stdout + r.stderr:
                        # Failing because the SQL no longer parses proves
                        # nothing about the clause: the mutation is wrong.
                        uncaught += 1
                        print(f"{name} -> INVALID: the mutated SQL does not parse", flush=True)
                    elif failed:
                        print(f"{name} -> FAILS: {', '.join(failed)}", flush=True)
                    else:
                        uncaught += 1
                        print(f"{name} -> NOT CAUGHT{' (build error)' if 'error[' in r.stderr else ''}", flush=True)
                open(os.path.join(wt, path), "w").write(base)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", wt], cwd=ROOT)
    ran = sum(1 for _, muts in FILES for name, *_ in muts if not only or any(o in name for o in only))
    print(f"{ran - uncaught} of {ran} mutations caught")
    return 1 if uncaught else 0


if __name__ == "__main__":
    sys.exit(main())
