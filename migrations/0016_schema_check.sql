-- leasehold schema, version 16: an operator's action checks the schema
-- version in its own statement.
--
-- The CLI acts only on the schema it was built for (older: run `leasehold
-- migrate`; newer: upgrade the CLI). It read the version with a statement
-- of its own before each action; an action's statement now checks it
-- itself, where it writes the action's record — and an action that takes
-- effect always writes its record in that statement (docs/design.md §7) —
-- so an action is one statement, and nothing lies between the check and
-- the write.
--
-- `leasehold_schema_is(expected)`: true when `expected` is NULL (an
-- operator that does not ask: a service's own `Operator`, which acts on a
-- newer schema during a rolling upgrade as its replica's claims do) or is
-- the schema's version; otherwise it raises SQLSTATE LH002, naming both
-- versions, and the statement writes nothing. VOLATILE: evaluated when the
-- statement runs, never folded at planning.
--
-- Safe to apply while replicas of version 15 run: it adds one function.
CREATE OR REPLACE FUNCTION leasehold_schema_is(expected integer) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    found integer;
BEGIN
    IF expected IS NULL THEN
        RETURN true;
    END IF;
    SELECT max(v.version) INTO found FROM leasehold_schema_version AS v;
    IF found IS DISTINCT FROM expected THEN
        RAISE EXCEPTION 'the leasehold schema is version %, this client was built for version %', found, expected
            USING ERRCODE = 'LH002';
    END IF;
    RETURN true;
END
$$;

INSERT INTO leasehold_schema_version (version, description)
VALUES (16, 'an operator''s action checks the schema version in its own statement')
ON CONFLICT (version) DO NOTHING;
