-- leasehold schema, version 4: operators' actions, for each key's history.
--
-- Safe to apply while replicas of version 3 run: one new table, which only
-- operators' tools (the CLI, the console) write and read.

-- One row per action an operator took through `leasehold::operator::Operator` (the
-- CLI and the console use it): trigger, pause, resume, release. The row is
-- written *before* the action runs, so an action that took effect is never
-- missing from the history; `outcome` is filled in by a second statement
-- and stays NULL if that never happened (the tool was killed, the database
-- went away in between): read NULL as "asked, outcome not recorded".
-- Actions come at human rate, so the table is not pruned.
CREATE TABLE IF NOT EXISTS leasehold_action (
    id      BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- What was acted on: a key, or every key of a job (a pause or resume).
    scope   TEXT        NOT NULL CHECK (scope IN ('key', 'job')),
    name    TEXT        NOT NULL CHECK (name <> '' AND octet_length(name) <= 255),
    action  TEXT        NOT NULL CHECK (octet_length(action) <= 64),
    -- Who: the console's authorised user, or the CLI's user@host.
    actor   TEXT        NOT NULL CHECK (actor <> '' AND octet_length(actor) <= 255),
    at      TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    outcome TEXT        CHECK (octet_length(outcome) <= 2000),
    -- The fence a release gave the key (it fences out every earlier tenure).
    fence   BIGINT
);
CREATE INDEX IF NOT EXISTS leasehold_action_target ON leasehold_action (scope, name, id);

INSERT INTO leasehold_schema_version (version, description)
VALUES (4, 'operators'' actions, for each key''s history')
ON CONFLICT (version) DO NOTHING;
