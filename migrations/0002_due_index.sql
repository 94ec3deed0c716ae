-- leasehold schema, version 2: an index on the schedule.
--
-- The scheduler's polling side (`LeaseStore::due_since`) asks "which keys
-- became due since my last look?"; this index makes that cost follow the
-- keys that became due, not the size of the table. Only a run's release
-- writes next_due_at, so renewals (which rewrite expires_at, still not
-- indexed) stay HOT updates.
CREATE INDEX IF NOT EXISTS leasehold_lease_next_due ON leasehold_lease (next_due_at);

INSERT INTO leasehold_schema_version (version, description)
VALUES (2, 'index on next_due_at for the batch scheduler')
ON CONFLICT (version) DO NOTHING;
