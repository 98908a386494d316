-- ironflow engine schema, version 3: a run's absolute deadline.
-- deadline_at is the epoch second by which the whole run must end, set when the run is made and
-- carried across resumes; a sub-workflow's row carries its root's. NULL: no deadline.
ALTER TABLE ironflow_runs ADD COLUMN IF NOT EXISTS deadline_at double precision;
