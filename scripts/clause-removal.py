#!/usr/bin/env python3
"""Clause removal: for each guard clause of the lease SQL (claim, renew and
release in src/lease/{claim,renew,release}.rs, the scheduler's batch
statements and the run history in src/lease/batch/, forget in
src/lease/forget.rs,
the fence SQL in src/lease/fence.rs, the operator's revoke in
src/lease/revoke.rs; pause, resume and trigger in control.rs, the pause
rule enforced by claim.rs's and batch/claim_due.rs's claims, written once in
pause_rule.rs and expanded at each call site;
what operators read in history.rs, recent.rs, fleet.rs and audit.rs;
the record each operator action writes in its own statement (the
`<statement>.recorded` markers); the stored keys of job kinds in keys.rs;
the fleet-wide limits' places in limit.rs, taken by batch/claim_due.rs and
kept in step by the renewals, releases, revoke and re-point;
the commit check on fenced transactions in
migrations/0005_fence_tenure.sql and 0015_commit_check_owner.sql; the fence jump on a new timeline in
migrations/0006_fence_timeline.sql),
remove it (or, for a rule that forbids something, add the forbidden clause)
in a scratch worktree of HEAD and run the scenario tests named with it
(`lease::` unless a mutation names others); every mutation must make at
least one named test fail.

    python3 scripts/clause-removal.py            # all mutations
    python3 scripts/clause-removal.py finish_many claim_due   # only mutations whose description contains one of these (not a marker name)
    python3 scripts/clause-removal.py --check    # only check markers and mutations name each other
    python3 scripts/clause-removal.py --list > docs/guard-clauses.md   # the statement list (CI checks it is current)

Guard markers. Each guard clause carries a marker comment where it starts,
`/* guard:<statement>.<clause> */` (lower case, digits, `_` and `.`): inside
the SQL text, or as a Rust comment just before a macro that expands to the
clause (`/* guard:claim.pause */ paused!(...)`). A mutation names its
marker(s) and gives the clause text `old` that starts at the marker and the
text `new` to put in its place. `old` is matched from the marker on,
whitespace-insensitively (any run of spaces and line breaks matches any
other) and with every other marker removed, so re-indenting, re-wrapping
or moving a statement does not break a mutation; only a change of the
clause's own words does. Several mutations may name one marker (removing a
clause, weakening it, adding a forbidden alternative); a mutation naming
several markers ("a b") is applied at each, for a clause written twice.

A new guard clause: put `/* guard:<statement>.<clause> */` where it starts,
add an entry `("<statement>.<clause>", "<statement>: what breaks", old, new,
"<scenario filters>")` to the list of its file below (a new file goes into
FILES), run `--check`, then `python3 scripts/clause-removal.py <statement>`:
the named scenarios must fail under the mutation. `--check` fails when a
mutation names a marker that is missing (a guard whose marker was lost), a
marker is in the code but no mutation names it (a guard without a
mutation), a marker appears twice, or `old` no longer follows its marker.

On the wire first. Building a mutant is most of the cost, so each
mutation is first tried on one unmutated build whose statements pass
through the testkit's rewriter (testkit/src/mutation.rs): a proxy in front
of the test clusters that applies the mutation to the SQL text on its way
to the server, with the same rule as `apply` below (other markers removed,
the clause matched word by word after the named marker). Only markers
written inside the SQL text reach the wire, so a mutation counts there only
when the rewriter reports it applied and never found a named marker
without its clause; the scenarios then ran exactly the statements the
mutant build would send. Everything else is built from source (and its
scenarios still pass the rewriter, which then mutates nothing): markers
before a macro, clauses written with Rust quoting, the failover scenarios
(their standby is reached past the rewriter), and any mutation the wire run
did not catch, so "not caught" is always the verdict of a real build. The
baseline scenarios run through the rewriter, unmutated, before anything.

Builds in target/clause-removal, a target dir of its own, without debug
info (smaller, faster links); CLAUSE_REMOVAL_TARGET_DIR names another, but
never one a checkout builds in: cargo names the scratch tree's artifacts as
the checkout's and would take a mutant's build for an up-to-date one there.
A new target dir starts as a copy of the checkout's dependency builds (the
workspace's `[profile.dev.package."*"]` gives dependencies no debug info
in either, and the build selects the whole workspace like `cargo test
--workspace`, so their features match): only this workspace's crates are
built again. The copy is safe in this direction: the scratch tree's files
are newer than every build copied, so cargo rebuilds whatever they feed.
Never touches the working tree. The next mutant builds while the last one's
scenarios run (CLAUSE_REMOVAL_JOBS mutants run at once, 2 by default, on
the wire as built). Exits 1 if a mutation is not caught or a check fails.
"""
import json, os, re, shutil, signal, subprocess, sys, tempfile, threading, time

ROOT = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True).stdout.strip()

# (marker(s), name, old, new[, tests]) in src/lease/{claim,renew,release}.rs.
mutations = [
 ("release.holder", "release: holder clause removed", "l.holder = $2 AND", "",
  "lease::late_release_after_takeover_leaves_the_new_holder"),
 ("release.fence", "release: fence clause removed", "l.fence = $3", "true",
  "lease::late_release_of_an_old_run_leaves_the_new_run"),
 ("claim.reentrant", "claim: re-entrant clause `l.holder = $2 OR` removed",
  "l.holder = $2 OR", ""),
 ("claim.expiry", "claim: expiry clause `OR l.expires_at <= clock_timestamp()` removed",
  "OR l.expires_at <= clock_timestamp()", ""),
 ("claim.takeover", "claim: whole takeover clause of the UPDATE removed",
  "(l.holder = $2 OR l.expires_at <= clock_timestamp())", "true"),
 ("claim.fence_kept", "claim: CASE keeping the fence of a live re-entrant claim removed (always fresh fence)",
  "CASE WHEN l.holder = $2 AND l.expires_at > clock_timestamp() THEN l.fence ELSE leasehold_next_fence() END",
  "leasehold_next_fence()"),
 ("claim.fence_kept", "claim: CASE condition without the expiry test (same holder keeps fence after expiry)",
  "CASE WHEN l.holder = $2 AND l.expires_at > clock_timestamp() THEN l.fence ELSE leasehold_next_fence() END",
  "CASE WHEN l.holder = $2 THEN l.fence ELSE leasehold_next_fence() END"),
 ("claim.takeover_fence", "claim: a takeover keeps the old tenure's fence instead of drawing one",
  "leasehold_next_fence()", "l.fence"),
 ("claim.insert_fence claim_run.insert_fence", "claim/claim_run: fence from `fence + 1` instead of the sequence",
  "leasehold_next_fence()", "1"),
 ("claim_run.expiry", "claim_run: same-holder re-entrance added (a duplicate holder id takes a live lease)",
  "l.expires_at <= clock_timestamp()", "(l.holder = EXCLUDED.holder OR l.expires_at <= clock_timestamp())", "lease::"),
 ("claim_run.expiry", "claim_run: expiry clause removed", "l.expires_at <= clock_timestamp()", "true"),
 ("claim_run.due", "claim_run: due clause removed",
  "($4 OR l.next_due_at IS NULL OR l.next_due_at <= clock_timestamp())", "true"),
 ("claim_run.fresh_fence", "claim_run: fresh fence replaced by keeping the old fence",
  "EXCLUDED.fence,", "CASE WHEN l.holder = EXCLUDED.holder THEN l.fence ELSE EXCLUDED.fence END,"),
 ("renew.holder", "renew: holder clause removed", "l.holder = $1 AND", ""),
 ("renew.fence", "renew: fence clause removed", "l.fence = t.fence AND", ""),
 ("renew.live renew.still_live", "renew: non-expiry clauses removed", "l.expires_at > clock_timestamp()", "true"),
 ("renew.skip_locked", "renew: SKIP LOCKED removed (a locked row stalls the heartbeat)", "SKIP LOCKED", "",
  "isolation::wedged_heartbeat"),
 ("claim_run.server_times", "claim_run: times taken from VALUES, before the row-lock wait (the slot bug)",
  "acquired_at = clock_timestamp(), expires_at = clock_timestamp() + make_interval(secs => $3),",
  "acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at,"),
 ("claim.precheck", "claim: the insert's no-row check removed (a losing claim draws a fence)",
  "NOT EXISTS (SELECT 1 FROM leasehold_lease c WHERE c.key = $1)", "true"),
 ("claim.pause", "claim: pause clause removed (a paused job's key is taken over)",
  'paused!(key = "l.key", jobs = "l.job_name")', '"false"', "operators::pause"),
 ("claim.insert_pause claim_run.insert_pause",
  "claim/claim_run: key-pause clause of the insert path removed (a paused key without a row is created)",
  'paused!(key = "$1", jobs = "NULL")', '"false"', "operators::pause"),
 ("claim_run.pause", "claim_run: pause clause removed (a paused job's key is claimed for a run)",
  'paused!(key = "l.key", jobs = "l.job_name")', '"false"', "operators::pause"),
 ("renew.cancelling_pause", "renew: pause-with-cancel never reported (a cancelling pause lets the run go on)",
  'paused!(cancelling, key = "r.key", jobs = "r.job_name")', '"false"',
  "operators::pause::a_pause_lets_the_run_finish_unless_it_cancels_it"),
 ("renew.cancelling_pause", "renew: cancel flag ignored (every pause cancels the run in progress)",
  'paused!(cancelling, key = "r.key", jobs = "r.job_name")', 'paused!(key = "r.key", jobs = "r.job_name")',
  "operators::pause::a_pause_lets_the_run_finish_unless_it_cancels_it"),
]

# The same, in src/lease/batch/*.rs (the scheduler's statements) and src/lease/forget.rs.
batch_mutations = [
 ("claim_due.limited_refused",
  "claim_due: the claim without the limits' steps takes a limited job's key (a replica that has not read a new limit starts runs past it)",
  "t.job NOT IN (SELECT m.job_name FROM leasehold_limit AS m)", "true",
  "scheduler::fleet_limit::a_replica_that_has_not_read_a_new_limit_yet_starts_no_run_beyond_it"),
 ("claim_due.slot_needed", "claim_due: a limited job's key claimed without a place (the fleet limit ignored)",
  "p.key IN (SELECT key FROM pair)", "true",
  "scheduler::fleet_limit::fifty_reports_on_three_replicas_run_at_most_four_at_once_oldest_first"),
 ("claim_due.slot_lock", "claim_due: places taken without their lock (two concurrent claims take one place)",
  "FOR UPDATE OF s SKIP LOCKED", "",
  "scheduler::fleet_limit::two_concurrent_claims_never_take_one_place"),
 ("claim_due.slot_under_limit", "claim_due: places above a lowered limit taken again",
  "s.slot_no <= lim.fleet_limit - lim.above", "true",
  "scheduler::fleet_limit::lowering_a_limit_stops_no_run_and_holds_new_starts_to_the_new_limit"),
 ("claim_due.slot_under_limit", "claim_due: runs holding places above a lowered limit not counted against it",
  "s.slot_no <= lim.fleet_limit - lim.above", "s.slot_no <= lim.fleet_limit",
  "scheduler::fleet_limit::lowering_a_limit_stops_no_run_and_holds_new_starts_to_the_new_limit"),
 ("claim_due.slot_expiry", "claim_due: a place written free (its tenure's start for its expiry)",
  "c.expires_at", "c.acquired_at",
  "scheduler::fleet_limit::fifty_reports_on_three_replicas_run_at_most_four_at_once_oldest_first"),
 ("claim_due.expiry", "claim_due: expiry clause removed (a batch takes a live lease)",
  "l.expires_at <= clock_timestamp()", "true",
  "scheduler::batch_claim::a_batch_claim_never_takes_a_live_lease"),
 ("claim_due.due", "claim_due: due clause removed (a key runs again in its slot)",
  "(l.next_due_at IS NULL OR l.next_due_at <= clock_timestamp())", "true",
  "scheduler::batch_claim runtime::three_replicas_run_a_job_once_per_slot"),
 ("claim_due.skip_locked", "claim_due: SKIP LOCKED removed (a locked row holds up the batch)", "SKIP LOCKED", "",
  "scheduler::batch_claim::a_locked_row_does_not_hold_up_the_other_keys_of_a_batch"),
 ("claim_due.fresh_fence", "claim_due: fence drawn straight from the sequence (no timeline check)",
  "leasehold_next_fence()", "nextval('leasehold_fence_seq')",
  # On the service's pool: the runtime's own connections check the timeline
  # as they open, so there the claim's check is rarely the one that jumps.
  "failover::an_asynchronous_failover_loses_the_lag_window_but_never_repeats_a_fence::shared_with_service"),
 ("claim_due.fresh_fence", "claim_due: fresh fence replaced by the row's old fence", "leasehold_next_fence()", "l.fence",
  "scheduler::batch_claim runtime::three_replicas_run_a_job_once_per_slot"),
 ("claim_due.expiry", "claim_due: same-holder re-entrance added (a duplicate holder id takes a live lease)",
  "l.expires_at <= clock_timestamp()", "(l.holder = $1 OR l.expires_at <= clock_timestamp())",
  "isolation::duplicate_holder"),
 ("claim_due.limit", "claim_due: LIMIT removed (a full replica claims beyond its room)", "$4", "$4 + 100",
  "scheduler::concurrency_limit"),
 ("claim_due.lost_open", "claim_due: every takeover records the previous tenure as a lost run (released runs and plain tenures too)",
  "p.run_open AND", "", "record::released_runs_and_plain_tenures_are_never_recorded_as_lost"),
 ("claim_due.lost_ring_order", "claim_due: a lost run overwrites the run's own recorded row",
  "WHERE r.run_no < EXCLUDED.run_no", "", "record::a_recorded_run_is_never_overwritten_as_lost"),
 ("claim_due.early", "claim_due: early takeover removed (a killed replica's run waits its whole lease)",
  "l.owner IS NOT NULL AND", "false AND",
  "takeover::a_killed_replicas_run_is_taken_over_within_two_seconds_with_the_default_lease"),
 ("finish_many.holder", "finish_many: holder clause removed", "l.holder = t.holder AND", "", "lease:: scheduler::"),
 ("finish_many.fence", "finish_many: fence clause removed", "l.fence = t.fence", "true", "lease::"),
 ("finish_many.skip_locked", "finish_many: SKIP LOCKED removed (a locked row holds up every release of the batch)",
  "SKIP LOCKED", "",
  "scheduler::batch_claim::a_release_meeting_a_locked_row_does_not_hold_up_the_others"),
 ("register.existing_kept", "register: an existing row's schedule reset at every start",
  "WHERE NOT s.there",
  "ON CONFLICT (key) DO UPDATE SET next_due_at = EXCLUDED.next_due_at", "runtime:: scheduler::"),
 ("register.existing_kept", "register: rows there not skipped (every restart fails its first statement and pays the conflict check)",
  "WHERE NOT s.there", "WHERE true",
  "scheduler::cost::a_thousand_keys_register_in_one_statement_and_idle_for_almost_nothing"),
 ("register.conflict_kept",
  "register: a row another replica inserted during the conflict-checked statement is overwritten",
  '"ON CONFLICT (key) DO NOTHING"',
  '"ON CONFLICT (key) DO UPDATE SET holder = EXCLUDED.holder, next_due_at = EXCLUDED.next_due_at"',
  "scheduler::cost::rows_other_replicas_insert_during_both_registration_statements_keep_their_schedule"),
 ("forget.expiry", "forget: expiry clause removed (a live lease is deleted)", "expires_at <= clock_timestamp()", "true",
  "scheduler::forget"),
 ("claim_due.pause", "claim_due: pause clause removed (a paused key runs)",
  'paused!(if_any, key = "l.key", jobs = "l.job_name, t.job")', '"false"', "operators::pause"),
 ("claim_due.pause", "claim_due: job clause of the pause removed (a paused job's keys run)",
  'paused!(if_any, key = "l.key", jobs = "l.job_name, t.job")', 'paused!(if_any, key = "l.key", jobs = "NULL")',
  "operators::pause::a_paused_job_pauses_all_its_keys_and_nothing_else"),
 ("finish_many.ring_order", "finish_many: history ring overwrites a newer run with a late older one",
  "r.run_no < h.run_no", "true", "operators::history"),
 ("finish_many.ring_first",
  "finish_many: a place of the ring inserted concurrently is overwritten by an older run",
  "WHERE r.run_no < EXCLUDED.run_no", "",
  "operators::history::an_older_run_never_overwrites_a_place_inserted_concurrently"),
 ("finish_many.slot_owed", "finish_many: retry forgets the slot owed (catch-up loses a failed slot)",
  "COALESCE(m.at, l.slot_at, l.next_due_at)",
  "COALESCE(m.at, clock_timestamp() + make_interval(secs => m.after), l.slot_at)", "operators::catch_up"),
 ("finish_many.earlier_life",
  "finish_many: a run of a key's earlier life released after the add overwrites the new life's first slot",
  "WHEN m.earlier_life THEN l.next_due_at", "",
  "fleet::key_life::a_run_of_the_old_life_released_after_the_add_leaves_the_new_schedule"),
 ("finish_many.trigger_kept",
  "finish_many: a trigger during the run overwritten by the release (the operator's trigger is lost)",
  "WHEN l.next_due_at > l.acquired_at THEN clock_timestamp()", "", "operators::trigger"),
 ("finish_many.plain_release",
  "finish_many: a plain release takes a due time not reached yet for a trigger (a key claimed early is due at once)",
  "WHEN m.at IS NULL AND m.after IS NULL THEN l.next_due_at", "",
  "lease::a_plain_release_keeps_a_due_time_not_reached_yet"),
 ("readd.unclaimed_since", "readd: a key a replica claimed since its removal is reset (the slots it owes are lost)",
  "l.acquired_at <= clock_timestamp() - make_interval(secs => $4)", "true", "scheduler::membership"),
 ("readd.not_running",
  "readd: a key running elsewhere is reset (its release takes the reset for a trigger: one run too many)",
  "l.expires_at <= clock_timestamp()", "true", "scheduler::membership"),
 ("readd.pause", "readd: a paused key is reset (the slots owed to its resume are lost)",
  'paused!(key = "l.key", jobs = "l.job_name, $3")', '"false"', "scheduler::membership"),
 ("forget.history", "forget: history kept after the row is deleted (a re-added key's ring refuses its runs)",
  "DELETE FROM leasehold_run WHERE key IN (SELECT key FROM gone)", "SELECT 1",
  "operators::history scheduler::forget"),
 ("forget.recorded", "forget: the forget's record dropped from its statement (a deleted row with no record of who deleted it)",
  "$2::text IS NOT NULL", "false", "operators::audit"),
 ("due_since.own_kinds", "due_since: a replica's own kinds counted as run nowhere (their vouch lapsed on the poll's snapshot)",
  "k.kind <> ALL($3) AND", "",
  "fleet::clauses::a_replicas_own_kinds_are_never_counted_unknown_by_its_poll")
]

# The fence SQL (src/lease/fence.rs): the downstream half of the lease.
fence_mutations = [
 ("fence_advance.never_lower", "fence advance: guard clause removed (a stale run's transaction goes through)",
  "WHERE f.last_fence <= EXCLUDED.last_fence", "", "fenced:: operators::revoke"),
 ("fence_advance.tenure_live",
  "fence advance: tenure-live check removed (a run resumed after its lease begins a fenced transaction)",
  "l.expires_at > clock_timestamp()", "true", "frozen_holder::commit_check"),
 ("fence_advance.idle_bound",
  "fence advance: idle bound not set (a frozen holder keeps the fence row locked while it is stopped)",
  "set_config(", "1, (", "frozen_holder::idle_bound"),
 ("fence_advance.shorter_idle_kept", "fence advance: the service's shorter idle timeout overridden by the lease",
  "LEAST(", "GREATEST(", "frozen_holder::idle_bound::a_shorter_idle_timeout_of_the_service_is_kept"),
 ("fence_advance.never_lower", "fence advance: `<=` made `<` (a run's second fenced transaction is refused)",
  "WHERE f.last_fence <= EXCLUDED.last_fence", "WHERE f.last_fence < EXCLUDED.last_fence", "fenced::"),
 ("fenced_update.fence", "fenced update: fence clause removed (a stale run overwrites a newer run's row)",
  "last_fence <= ${fence}", "true", "fenced::"),
 ("fenced_update.tenure_live",
  "fenced update: tenure check removed (a run resumed after its lease updates a row no newer run wrote)",
  "l.expires_at > clock_timestamp())\"", "true)\"", "frozen_holder::commit_check"),
 ("fenced_update.fence", "fenced update: `<=` made `<` (a run cannot write its own row twice)",
  "last_fence <= ${fence}", "last_fence < ${fence}", "fenced::"),
]

# An operator's revoke (src/lease/revoke.rs): `leasehold revoke [--force]`.
revoke_mutations = [
 ("revoke.place", "revoke: the revoked tenure keeps its place until its lease would have expired",
  "s.key = old.key AND s.fence = old.fence", "false",
  "scheduler::fleet_limit::a_revoked_runs_place_is_free_at_once"),
 ("revoke.force", "revoke: force clause removed (a held lease is revoked without --force)",
  "($2 OR old.expires_at <= clock_timestamp())", "true", "operators::revoke"),
 ("revoke.new_fence", "revoke: the old fence kept (the revoked run still writes through the fence)",
  "leasehold_next_fence()", "l.fence", "operators::revoke"),
 ("revoke.expire", "revoke: a held lease not expired (no other replica can claim it)", "LEAST(", "GREATEST(",
  "operators::revoke"),
 ("revoke.raise_fences", "revoke: fence rows not raised (the revoked run writes until a newer run does)",
  "SELECT r, ended.fence FROM ended CROSS JOIN unnest($3::text[]) AS r",
  "SELECT r, ended.fence FROM ended CROSS JOIN unnest($3::text[]) AS r WHERE false", "operators::revoke"),
 ("revoke.never_lower", "revoke: a fence row lowered (GREATEST removed)",
  "GREATEST(f.last_fence, EXCLUDED.last_fence)", "EXCLUDED.last_fence", "operators::revoke"),
 ("revoke.tenure_cleared",
  "revoke: the tenure's key kept on raised rows (the commit check refuses the operator's revoke)",
  "lease_key = NULL", "lease_key = f.lease_key", "operators::revoke"),
 ("revoke.recorded", "revoke: the revoke's record dropped from its statement (a tenure ended with no record of who ended it)",
  "$4::text IS NOT NULL", "false", "operators::audit"),
]

# The commit check on fenced transactions (F5): a deferred trigger
# (migrations/0005_fence_tenure.sql) running the function of
# migrations/0015_commit_check_owner.sql, applied by migrate() to every
# test database.
commit_check_trigger_mutations = [
 ("commit_check.deferred", "commit check: run at the advance instead of at COMMIT",
  "DEFERRABLE INITIALLY DEFERRED", "NOT DEFERRABLE", "frozen_holder::commit_check"),
]
commit_check_mutations = [
 ("commit_check.live", "commit check: expiry clause removed (a commit after the lease expired lands)",
  "l.expires_at > clock_timestamp()", "true", "frozen_holder::commit_check"),
 ("commit_check.fence", "commit check: fence clause removed (a commit after another replica took the key lands)",
  "l.fence = NEW.last_fence", "true", "frozen_holder::commit_check"),
 ("commit_check.owner_alive",
  "commit check: the run's registration not read (a run whose registration died commits after its place went to another key)",
  "l.owner IS NOT NULL AND", "false AND",
  "scheduler::fleet_limit::a_run_whose_registration_died_commits_nothing_once_its_place_is_taken"),
]

# Fences across a promotion (migrations/0006_fence_timeline.sql, invariant
# 4): the sequence jumps on the first fence drawn on a new timeline.
timeline_mutations = [
 ("timeline.jump", "fence timeline: the jump removed (a promoted standby repeats the lost window's fences)",
  "PERFORM setval('leasehold_fence_seq', to_value);", "", "failover::an_asynchronous_failover"),
 ("timeline.checked", "fence timeline: the session never checks the timeline",
  "current_setting('leasehold.fence_timeline', true) <> ''", "true",
  "failover::an_asynchronous_failover failover::a_database_on_another_timeline"),
 ("timeline.recorded_once", "fence timeline: the recorded-timeline guard removed (every racing session jumps)",
  "WHERE t.timeline <> tl", "", "failover::a_database_on_another_timeline"),
]

# The operators' controls (src/lease/control.rs): pause, resume, trigger.
# (The pause rule itself is enforced by the claims: see the pause
# mutations above.)
control_mutations = [
 ("pause.cancel_kept", "pause: a second pause without cancel downgrades a pause with cancel",
  "p.cancel OR EXCLUDED.cancel", "EXCLUDED.cancel", "operators::resume"),
 ("resume.due_only", "resume: keys not yet due are made due too (a resume runs every key at once)",
  "COALESCE(l.next_due_at, '-infinity') <= clock_timestamp()", "true", "operators::resume operators::pause"),
 ("resume.not_running",
  "resume: a running key is woken (its release takes the resume for a trigger: one run too many)",
  "l.expires_at <= clock_timestamp()", "true", "operators::resume"),
 ("resume.target", "resume: the target clause removed (resuming one key wakes every key)",
  'pause_covers!(pause = "gone", key = "l.key", jobs = "l.job_name")', '"true"',
  "operators::resume operators::pause"),
 ("pause.recorded", "pause: the pause's record dropped from its statement (a key paused with no record of who paused it)",
  "$5::text IS NOT NULL", "false", "operators::audit"),
 ("resume.recorded", "resume: the resume's record dropped from its statement (a pause lifted with no record of who lifted it)",
  "$4::text IS NOT NULL", "false", "operators::audit"),
 ("trigger.recorded", "trigger: the trigger's record dropped from its statement (a run made due with no record of who asked)",
  "$3::text IS NOT NULL", "false", "operators::audit"),
]

# What operators read and the record of what they did (src/lease/history.rs,
# recent.rs, fleet.rs, audit.rs): the console and the CLI act on what these say, so a
# paused key reported as held, or a registration reported as a live replica,
# misleads an operator into the wrong action.
read_mutations = [
 ("list_page.held_not_paused", "list_page: a paused key that is held reads as held too", "NOT s.paused AND", "",
  "console::pages"),
 ("list_page.cursor", "list_page: the page cursor ignored (every page is the first)",
  "($3::text IS NULL OR l.key > $3)", "true", "console::pages"),
 ("list_page.free_was_claimed", "list_page: a key never run reads as free too",
  "s.expires_at - s.acquired_at > interval '1 microsecond'", "true",
  "operators::key_state"),
 ("list_page.never_claimed", "list_page: a free key that ran reads as never-run too",
  "s.expires_at - s.acquired_at <= interval '1 microsecond'", "true",
  "operators::key_state"),
 ("list_page.free_not_removed", "list_page: a removed key of a kind reads as a live free key too",
  "NOT s.removed", "true",
  "fleet::key_life::a_key_added_again_starts_on_its_new_schedule_with_a_newer_version"),
]
recent_mutations = [
 ("recent_runs.key", "recent_runs: the key clause removed (a key's strip shows other keys' runs)",
  "run.key = k.key", "true", "console::timeline"),
 ("recent_runs.since", "recent_runs: the since clause removed (a window reads runs that ended before it)",
  "($2::timestamptz IS NULL OR run.ended_at >= $2)", "true", "console::timeline::recent_runs"),
]
fleet_mutations = [
 ("fleet.claimed_only", "fleet: a never-claimed registration row counts as a tenure",
  "l.expires_at - l.acquired_at > interval '1 microsecond'", "true", "console::pages"),
]
audit_mutations = [
 ("actions.job_scope", "actions: a job's actions left out of its keys' history",
  "OR (scope = 'job' AND name = (SELECT job_name FROM leasehold_lease WHERE key = $1))", "", "operators::audit"),
 ("job_actions.key_scope", "job_actions: its keys' actions left out (their releases unmarked)",
  "OR (scope = 'key' AND name IN (SELECT key FROM leasehold_lease WHERE job_name = $1))", "",
  "console::timeline::a_jobs_page"),
 ("job_actions.key_job", "job_actions: every key's actions taken for the job's",
  "WHERE job_name = $1", "", "console::timeline::a_jobs_page"),
 ("job_actions.job_name", "job_actions: every job's actions taken for the job's",
  "name = $1", "true", "console::timeline::a_jobs_page"),
]

# The stored keys of job kinds (src/lease/keys.rs).
keys_mutations = [
 ("update_key.kind", "keys: update_key rewrites a key of another kind", "AND kind = $2", "",
  "fleet::clauses::an_update_or_removal_of_another_kind_changes_nothing"),
 ("remove_key.kind", "keys: remove_key deletes a key of another kind", "AND kind = $2", "",
  "fleet::clauses::an_update_or_removal_of_another_kind_changes_nothing"),
 ("update_key.clear_error", "keys: update_key keeps the old version's reported problem",
  "args_error = NULL,", "",
  "fleet::arguments::an_undeserializable_key_is_reported_and_never_run"),
 ("add_keys.generation", "keys: add_keys does not move the kind's generation (running replicas never see the key)",
  "generation = k.generation + 1,", "",
  "fleet::handover::a_key_added_through_a_runs_on_b_when_a_is_gone"),
 ("add_keys.version_goes_on", "keys: a key added again starts its version at 1 again (a downstream deduplicating on it is fooled)",
  "coalesce((SELECT d.last_version FROM leasehold_key_life AS d WHERE d.key = t.key), 0) + 1", "1",
  "fleet::key_life::a_key_added_again_starts_on_its_new_schedule_with_a_newer_version"),
 ("add_keys.new_life", "keys: a key added again keeps the due time of its old life (runs a slot the new schedule does not have)",
  "next_due_at = t.first_due, slot_at = t.first_due", "next_due_at = l.next_due_at",
  "fleet::key_life::a_key_added_again_starts_on_its_new_schedule_with_a_newer_version"),
 ("add_keys.count", "keys: add_keys does not count the keys of an existing kind",
  "keys = k.keys + excluded.keys", "keys = k.keys",
  "fleet::clauses::an_update_or_removal_of_another_kind_changes_nothing"),
 ("update_key.generation", "keys: update_key does not move the kind's generation",
  "generation = k.generation + 1", "generation = k.generation",
  "fleet::clauses::a_new_schedule_reaches_a_running_replica"),
 ("remove_key.generation", "keys: remove_key does not move the kind's generation (running replicas go on running it)",
  "generation = k.generation + 1,", "",
  "fleet::handover::a_key_removed_through_b_stops_on_a_within_one_poll"),
 ("remove_key.count", "keys: remove_key does not count the key removed",
  "keys = k.keys - 1", "keys = k.keys",
  "fleet::clauses::an_update_or_removal_of_another_kind_changes_nothing"),
 ("add_keys.recorded", "keys: the adds' records dropped from their statement (keys added with no record of who added them)",
  "$9::text IS NOT NULL", "false", "operators::audit"),
 ("update_key.recorded", "keys: the update's record dropped from its statement (a key changed with no record of who changed it)",
  "$8::text IS NOT NULL", "false", "operators::audit::every_answer"),
 ("remove_key.recorded", "keys: the removal's record dropped from its statement (a key removed with no record of who removed it)",
  "$4::text IS NOT NULL", "false", "operators::audit::every_answer"),
 ("report_args.version", "keys: a report about an old version marks the new one",
  "AND version = $2", "",
  "fleet::clauses::a_report_about_an_old_version_leaves_the_new_one_clear"),
 ("reschedule.due", "keys: a new schedule postpones a due run",
  "OR next_due_at IS NULL OR next_due_at > $2", "OR true",
  "fleet::clauses::a_new_schedule_never_postpones_a_due_run"),
 ("reschedule.not_due", "keys: a new schedule moves an owed slot later",
  "next_due_at > clock_timestamp() AND", "",
  "scheduler::schedule_change::a_new_schedule_never_postpones_an_owed_slot"),
 ("reschedule.not_retry", "keys: a new schedule moves a retry's back-off later",
  "AND slot_at = next_due_at", "",
  "scheduler::schedule_change::a_new_schedule_never_postpones_a_retry"),
]

# The pause rule itself (src/lease/pause_rule.rs), which every statement
# above expands: each half of it removed for all of them at once. The
# mutations above remove it from one statement at a time, at its call site.
pause_rule_mutations = [
 ("pause_rule.job", "pause rule: the job half removed (a job pause covers none of its keys)",
  '".scope = \'job\' AND "', '".scope = \'job\' AND false AND "',
  "operators::pause::a_paused_job_pauses_all_its_keys_and_nothing_else"),
 ("pause_rule.key", "pause rule: the key half removed (a key pause covers nothing)",
  '".scope = \'key\' AND "', '".scope = \'key\' AND false AND "', "operators::pause"),
]

def by_file(paths, muts):
    """`muts` spread over `paths`: each mutation goes with the file that
    holds its (first) marker, so a statement can move between the files of
    one concern's folder without touching its mutations."""
    texts = {p: markers_in(open(os.path.join(ROOT, p)).read()) for p in paths}
    out = {p: [] for p in paths}
    for m in muts:
        first = m[0].split()[0]
        home = next((p for p in paths if first in texts[p]), paths[0])
        out[home].append(m)
    return [(p, out[p]) for p in paths]


LEASE = ["src/lease/claim.rs", "src/lease/renew.rs", "src/lease/release.rs"]
BATCH = ["src/lease/batch/register.rs", "src/lease/batch/claim_due.rs", "src/lease/batch/finish.rs",
         "src/lease/batch/poll.rs", "src/lease/forget.rs"]


# The liveness rule (src/lease/liveness.rs, invariant 10), expanded in
# claim_due's early takeover, the reporter and the re-point.
liveness_mutations = [
 ("repoint.place", "repoint: a re-pointed run's place keeps the dead registration (freed while the run goes on)",
  "s.key = m.key AND s.fence = m.fence", "false",
  "scheduler::fleet_limit::a_run_whose_stamp_moved_to_a_new_registration_keeps_its_place"),
 ("liveness.gone_for_grace", "liveness: grace removed (a live replica whose session ended is taken over before it stops its run)",
  "r.gone_seen_at + r.grace <= clock_timestamp()", "r.gone_seen_at IS NOT NULL",
  "takeover::a_replica_whose_session_ended_stops_its_run_before_another_may_take_it_over"),
 ("liveness.this_server_life", "liveness: server-life test removed (a server restart hands every run in progress over early)",
  "n.registered_at > pg_postmaster_start_time() THEN", "true THEN",
  "takeover::a_server_restart_takes_no_run_over_early"),
 ("liveness.session_gone", "liveness: session test removed (a frozen replica's run is taken over after the grace)",
  "pg_try_advisory_xact_lock(", "true OR pg_try_advisory_xact_lock(",
  "takeover::a_frozen_replica_keeps_its_run_past_the_grace"),
]


# The fleet-wide limit's rules (src/lease/limit.rs, invariant 11), expanded
# in the batch claim, the renewals and the releases.
limit_mutations = [
 ("set_limit.frozen_bounded",
  "set_limit: a set frozen holding its lock holds every claim, renewal and release of the fleet up for as long as it is frozen",
  "SET LOCAL idle_in_transaction_session_timeout = '1s';", "",
  "scheduler::fleet_limit::a_set_frozen_holding_its_lock_holds_the_claims_up_for_at_most_a_second"),
 ("set_limit.claims_drained",
  "set_limit: the set does not wait for the claims in flight (a run claimed beside the set holds no place: N + 1 at once)",
  "LOCK TABLE leasehold_lease IN SHARE MODE", "SELECT 1",
  "scheduler::fleet_limit::a_limit_set_beside_a_claim_in_flight_counts_the_run_it_starts"),
 ("set_limit.recorded", "set_limit: the limit's record dropped from its statement (a limit set with no record of who set it)",
  "$5::text IS NOT NULL", "false",
  "operators::audit::a_fleet_limit_set_changed_and_lifted_is_recorded_on_its_job"),
 ("clear_limit.recorded", "clear_limit: the lift's record dropped from its statement (a limit lifted with no record of who lifted it)",
  "$3::text IS NOT NULL", "false",
  "operators::audit::a_fleet_limit_set_changed_and_lifted_is_recorded_on_its_job"),
 ("limit.slot_expired", "limit: a taken place read as free (the fleet limit exceeded)",
  "s.expires_at <= clock_timestamp() OR", "true OR",
  "scheduler::fleet_limit::fifty_reports_on_three_replicas_run_at_most_four_at_once_oldest_first"),
 ("limit.slot_tenure", "limit: places not kept in step with their tenures (a released run's place held a lease)",
  "s.key = x.key AND s.fence = x.fence", "false",
  "scheduler::fleet_limit::a_place_freed_by_a_release_is_taken_at_once_on_another_replica"),
]


def files():
    return (by_file(LEASE, mutations) + [("src/lease/control.rs", control_mutations)] + by_file(BATCH, batch_mutations)
            + [("src/lease/fence.rs", fence_mutations), ("src/lease/revoke.rs", revoke_mutations),
               ("src/lease/history.rs", read_mutations),
               ("src/lease/recent.rs", recent_mutations), ("src/lease/fleet.rs", fleet_mutations),
               ("src/lease/audit.rs", audit_mutations),
               ("src/lease/keys.rs", keys_mutations), ("src/lease/pause_rule.rs", pause_rule_mutations),
               ("src/lease/liveness.rs", liveness_mutations), ("src/lease/limit.rs", limit_mutations),
               ("migrations/0005_fence_tenure.sql", commit_check_trigger_mutations),
               ("migrations/0015_commit_check_owner.sql", commit_check_mutations),
               ("migrations/0006_fence_timeline.sql", timeline_mutations)])


MARKER = re.compile(r"/\* guard:([a-z0-9_.]+) \*/[ \t]*")


TESTS = "\n#[cfg(test)]\nmod tests"


def split_tests(src):
    """A Rust file's code and its unit-test module, whose expected SQL text
    quotes the markers: those quotes are not guards."""
    at = src.find(TESTS)
    return (src, "") if at < 0 else (src[:at], src[at:])


def markers_in(src):
    return [m.group(1) for m in MARKER.finditer(split_tests(src)[0])]


def apply(src, markers, old, new):
    """`src` with the clause `old` that starts at each of `markers` replaced
    by `new`, every marker comment removed; None when a marker is not there
    exactly once or `old` does not start at it."""
    names = markers.split()
    if any(markers_in(src).count(m) != 1 for m in names):
        return None
    src, tests = split_tests(src)
    # Each named marker becomes a NUL-numbered placeholder; the others go,
    # with the spaces after them, so `(/* guard:x */ a` reads `(a`.
    plain = MARKER.sub(lambda m: f"\0{names.index(m.group(1))}\0" if m.group(1) in names else "", src)
    clause = re.compile(r"\s*" + r"\s+".join(re.escape(t) for t in old.split()))
    for i in range(len(names)):
        here = f"\0{i}\0"
        at = plain.index(here)
        found = clause.match(plain, at + len(here))
        if found is None:
            return None
        plain = plain[:at] + new + plain[found.end():]
    return plain + tests


def check():
    """Every mutation's markers are in its file once, each followed by its
    clause; every marker in the checked files is named by a mutation."""
    FILES = files()
    problems = []
    named = {}
    for path, muts in FILES:
        src = open(os.path.join(ROOT, path)).read()
        for markers, name, old, new, *_ in muts:
            for marker in markers.split():
                named.setdefault(marker, path)
                n = markers_in(src).count(marker)
                if n != 1:
                    problems.append(f"{path}: marker guard:{marker} found {n} times, 1 expected (mutation {name!r})")
                elif apply(src, marker, old, new) is None:
                    problems.append(f"{path}: the clause after guard:{marker} no longer reads {old!r} (mutation {name!r})")
    for path in sorted({p for p, _ in FILES} | set(scanned())):
        for marker in markers_in(open(os.path.join(ROOT, path)).read()):
            if named.get(marker) != path:
                problems.append(f"{path}: guard:{marker} is named by no mutation of this file")
    for p in problems:
        print(f"!! {p}")
    return problems


def scanned():
    """Every file that may hold SQL: a marker anywhere else is checked too."""
    out = subprocess.run(["git", "ls-files", "*.rs", "*.sql"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    return out


# Mutants whose scenarios run at once. A mutant's scenarios mostly wait on
# PostgreSQL and lease timers, so the next mutant builds while they run:
# about half the time of building and running each in turn on 2 cores.
JOBS = max(1, int(os.environ.get("CLAUSE_REMOVAL_JOBS", "2")))


def test_env(env):
    """What `cargo test` gives a test binary, for running the binary itself:
    the `[env]` of .cargo/config.toml (RUST_TEST_THREADS)."""
    import tomllib
    env = dict(env)
    with open(os.path.join(ROOT, ".cargo/config.toml"), "rb") as f:
        for key, value in tomllib.load(f).get("env", {}).items():
            if isinstance(value, dict):
                if value.get("force") or key not in env:
                    env[key] = str(value["value"])
            else:
                env.setdefault(key, str(value))
    return env


def seed(target):
    """Copies the checkout's dependency builds into a new target dir (see the
    header); a target dir that exists already is left as it is."""
    source = os.path.join(os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target"), "debug")
    dest = os.path.join(target, "debug")
    if os.path.exists(dest) or not os.path.isdir(os.path.join(source, "deps")):
        return
    started = time.monotonic()
    os.makedirs(dest)
    for part in ("deps", "build", ".fingerprint"):
        if os.path.isdir(os.path.join(source, part)):
            subprocess.run(["cp", "-a", "--reflink=auto", os.path.join(source, part), dest], check=True)
    print(f"   target dir seeded from {source} in {time.monotonic() - started:.0f} s", flush=True)


def build(wt, env, tmp, label):
    """Builds the integration test binary of the scratch tree as it is now and
    copies it out (the next mutant's build overwrites cargo's): its path and
    cargo's diagnostics; the path is None when the build failed."""
    r = subprocess.run(["cargo", "test", "-q", "--workspace", "--test", "it", "--no-run",
                        "--message-format=json-render-diagnostics"], cwd=wt, capture_output=True, text=True, env=env)
    exe = None
    for line in r.stdout.splitlines():
        if not line.startswith("{"):
            continue
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("target", {}).get("name") == "it":
            exe = msg.get("executable") or exe
    if r.returncode != 0 or exe is None:
        return None, r.stderr
    copy = os.path.join(tmp, f"it-{label}")
    shutil.copy2(exe, copy)
    return copy, r.stderr


def verdict(name, out, took):
    """One line for a finished mutant, and whether it was caught."""
    failed = FAILED.findall(out)
    if "syntax error at or near" in out:
        # Failing because the SQL no longer parses proves nothing about the
        # clause: the mutation is wrong.
        return False, f"{name} -> INVALID: the mutated SQL does not parse {took}"
    if failed:
        return True, f"{name} -> FAILS: {', '.join(failed)} {took}"
    return False, f"{name} -> NOT CAUGHT {took}"


FAILED = re.compile(r"^test (\S+) \.\.\. FAILED$", re.M)


class Scenarios:
    """The test binary `exe` running the scenarios `names` for one mutant,
    stopped at the first one that fails: one failure is the verdict, and
    the others would only add their time. Their output is not captured
    (`--nocapture`), so a failure's panic message, printed when it
    happens, is in the output before the stop."""

    def __init__(self, exe, names, cwd, env):
        self.exe = exe
        self.began = time.monotonic()
        self.lines = []
        self.proc = subprocess.Popen([exe, "--nocapture", *names], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, errors="replace")
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            if FAILED.match(line.rstrip("\n")) and self.proc.poll() is None:
                # The test binary alone: its clusters' watchdogs stop them.
                self.proc.kill()
        self.proc.wait()

    def done(self):
        return not self.reader.is_alive()

    def output(self):
        self.reader.join()
        return "".join(self.lines)


# Scenario filters whose tests reach a server past the rewriter (the
# failover tests' standby and the proxy in front of it): their mutations
# are always built from source.
NOT_ON_THE_WIRE = ("failover::",)


def wire_env(run_env, markers, old, new, report):
    """The environment of a test binary whose statements go through the
    testkit's rewriter (testkit/src/mutation.rs), which applies the mutation
    on the wire and writes what it did to `report`."""
    return {**run_env, "LEASEHOLD_MUTATION_MARKERS": markers, "LEASEHOLD_MUTATION_OLD": old,
            "LEASEHOLD_MUTATION_NEW": new, "LEASEHOLD_MUTATION_REPORT": report}


def listing(FILES):
    """docs/guard-clauses.md: every guard clause, by statement, with its
    file, what breaks without it and the scenarios that fail then."""
    rows = sorted((ms.split()[0].split(".")[0], ms, path, name, (filters[0] if filters else "lease::"))
                  for path, muts in FILES for ms, name, old, new, *filters in muts)
    out = ["# Guard clauses: the statement list",
           "",
           "Generated by `python3 scripts/clause-removal.py --list > docs/guard-clauses.md` from the",
           "mutations in `scripts/clause-removal.py`; CI fails when it is out of date. Each row is one",
           "mutation of a guard clause (`/* guard:<statement>.<clause> */` in the SQL): the file that holds",
           "it, what breaks without it, and the scenario tests (name prefixes) of which at least one fails",
           "when it is removed, as `python3 scripts/clause-removal.py` checks in CI.",
           "",
           f"{len(rows)} mutations on {len({m for _, ms, *_ in rows for m in ms.split()})} markers.",
           "",
           "| statement | marker | file | what breaks without it | scenarios |",
           "|---|---|---|---|---|"]
    for stmt, ms, path, name, filters in rows:
        what = name.split(": ", 1)[-1].replace("|", "\\|")
        tests = ", ".join(filters.split())
        out.append(f"| {stmt} | {', '.join(f'`{m}`' for m in ms.split())} | `{path}` | {what} | {tests} |")
    return "\n".join(out) + "\n"


def main():
    FILES = files()
    if "--list" in sys.argv:
        sys.stdout.write(listing(FILES))
        return 0
    check_only = "--check" in sys.argv
    problems = check()
    total = sum(len(m) for _, m in FILES)
    markers = {m for _, muts in FILES for ms, *_ in muts for m in ms.split()}
    if check_only or problems:
        print(f"{total} mutations on {len(markers)} guard markers: {len(problems)} problem(s)")
        return 1 if problems else 0
    only = [a for a in sys.argv[1:] if not a.startswith("-")]
    chosen = [(path, markers, name, old, new, (filters[0] if filters else "lease::").split())
              for path, muts in FILES for markers, name, old, new, *filters in muts
              if not only or any(o in name for o in only)]
    if only and not chosen:
        print(f"no mutation's description contains any of {only}: name words of the descriptions "
              f"(e.g. \"claim_due\", \"lost run\"), not marker names", file=sys.stderr)
        return 2
    uncaught = 0
    by_wire = by_build = 0
    # Stopped from outside (a timeout, Ctrl-C), the scratch worktree is
    # still removed; one an earlier killed run left registered is pruned.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=True)
    with tempfile.TemporaryDirectory() as tmp:
        wt = os.path.join(tmp, "wt")
        subprocess.run(["git", "worktree", "add", "-q", "--detach", wt, "HEAD"], cwd=ROOT, check=True)
        try:
            env = {**os.environ, "CARGO_TARGET_DIR": os.environ.get("CLAUSE_REMOVAL_TARGET_DIR")
                   or os.path.join(ROOT, "target/clause-removal"),
                   "CARGO_PROFILE_DEV_DEBUG": "0", "RUST_BACKTRACE": "0"}
            seed(env["CARGO_TARGET_DIR"])
            run_env = test_env(env)
            # Unmutated, every scenario named below must pass, and through
            # the rewriter too: otherwise a failing scenario would count
            # every mutation as caught.
            baseline = sorted({n for *_, names in chosen for n in names})
            unmutated, diagnostics = build(wt, env, tmp, "baseline")
            if unmutated is None:
                print(f"!! the unmutated tree does not build:\n{diagnostics[-4000:]}")
                return 1
            r = subprocess.run([unmutated, "-q", *baseline], cwd=wt, capture_output=True, text=True,
                               env=wire_env(run_env, "none.none", "", "", os.path.join(tmp, "baseline.report")))
            if r.returncode != 0:
                failed = re.findall(r"^    (\w+::\S+)$", r.stdout, re.M)
                # All the baseline's scenarios run at once, through the
                # rewriter, while the first mutants build: a scenario with
                # tight timings (a 2 s lease under repeated connection kills)
                # can miss them. Each one that failed runs again, alone; the
                # baseline holds if every one passes then (they still pass
                # unmutated, through the rewriter), and the log says so.
                if failed:
                    print(f"unmutated, these failed among all the scenarios at once: {', '.join(failed)}; "
                          "running each again alone", flush=True)
                    again = subprocess.run([unmutated, "-q", "--exact", "--test-threads=1", *failed], cwd=wt,
                                           capture_output=True, text=True,
                                           env=wire_env(run_env, "none.none", "", "",
                                                        os.path.join(tmp, "baseline-again.report")))
                    if again.returncode == 0:
                        r = again
            if r.returncode != 0:
                failed = re.findall(r"^    (\w+::\S+)$", r.stdout, re.M)
                print(f"!! unmutated, these scenarios already fail: {', '.join(failed) or r.stderr[-2000:]}")
                # What each one said, so a failure here can be diagnosed
                # from the CI log alone.
                for panic in re.findall(r"^thread '.*' .*panicked at .*\n(?:.*\n){0,6}", r.stdout + r.stderr, re.M):
                    print(panic.rstrip())
                return 1
            print(f"baseline: the {len(baseline)} scenario filters pass unmutated, through the rewriter too",
                  flush=True)

            running = []  # (mutation, scenarios, report file or None), oldest first
            to_build = []

            def finish_one():
                """Waits for a mutant's scenarios to end (the first one that
                has, else the oldest) and says what it showed."""
                nonlocal uncaught, by_wire, by_build
                while not any(r[1].done() for r in running):
                    running[0][1].reader.join(0.1)
                mutation, scenarios, report = running.pop(next(
                    (i for i, r in enumerate(running) if r[1].done()), 0))
                name = mutation[2]
                out = scenarios.output()
                took = f"[{time.monotonic() - scenarios.began:.0f} s]"
                caught, line = verdict(name, out, took)
                if report is not None:
                    events = open(report).read().split() if os.path.exists(report) else []
                    # Trusted only when the rewriter applied the clause and
                    # never met a named marker without it; a mutation not
                    # caught on the wire is built from source before it is
                    # called uncaught.
                    if "applied" in events and "mismatch" not in events and caught:
                        by_wire += 1
                        print(f"{line} (on the wire)", flush=True)
                    else:
                        to_build.append(mutation)
                    return
                os.remove(scenarios.exe)
                by_build += 1
                uncaught += not caught
                print(f"{line} (built)", flush=True)

            # First every mutation on the wire, on the unmutated build:
            # no build at all for a clause written in the SQL text.
            for number, mutation in enumerate(chosen):
                path, markers, name, old, new, names = mutation
                if any(n.startswith(NOT_ON_THE_WIRE) for n in names):
                    to_build.append(mutation)
                    continue
                while len(running) >= JOBS:
                    finish_one()
                report = os.path.join(tmp, f"wire-{number}.report")
                running.append((mutation, Scenarios(unmutated, names, wt, wire_env(run_env, markers, old, new, report)),
                                report))
            while running:
                finish_one()

            # Then the rest from source, one build each: the next mutant
            # builds while the last one's scenarios run.
            for number, mutation in enumerate(to_build):
                path, markers, name, old, new, names = mutation
                base = open(os.path.join(wt, path)).read()
                open(os.path.join(wt, path), "w").write(apply(base, markers, old, new))
                began = time.monotonic()
                exe, diagnostics = build(wt, env, tmp, f"mutant-{number}")
                open(os.path.join(wt, path), "w").write(base)
                if exe is None:
                    uncaught += 1
                    by_build += 1
                    print(f"{name} -> NOT CAUGHT (build error)\n{diagnostics[-2000:]}", flush=True)
                    continue
                while len(running) >= JOBS:
                    finish_one()
                # Through the rewriter too, mutating nothing: the baseline
                # above ran that way.
                scenarios = Scenarios(exe, names, wt, wire_env(run_env, "none.none", "", "", os.devnull))
                scenarios.began = began
                running.append((mutation, scenarios, None))
            while running:
                finish_one()
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", wt], cwd=ROOT)
    print(f"{len(chosen) - uncaught} of {len(chosen)} mutations caught "
          f"({by_wire} on the wire of one build, {by_build} built from source)")
    return 1 if uncaught else 0


if __name__ == "__main__":
    sys.exit(main())
