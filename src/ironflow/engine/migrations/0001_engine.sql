-- ironflow engine schema, version 1: runs, their steps, and Provider Account rate-limit windows.
-- Times are unix seconds (double precision) from the server clock; JSON columns hold values
-- the engine wrote (never a credential).
CREATE TABLE IF NOT EXISTS ironflow_runs (
    id text PRIMARY KEY,
    workflow text NOT NULL,
    input jsonb,
    status text NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'cancelled')),
    root_run_id text NOT NULL,
    parent_run_id text,
    backend text,
    output jsonb,
    error jsonb,
    attempt integer NOT NULL DEFAULT 0,
    worker text,
    lease_until double precision,
    available_at double precision NOT NULL,
    cancel_requested boolean NOT NULL DEFAULT false,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL
);

CREATE INDEX IF NOT EXISTS ironflow_runs_due ON ironflow_runs (available_at, id)
    WHERE parent_run_id IS NULL AND status IN ('pending', 'running');
CREATE INDEX IF NOT EXISTS ironflow_runs_root ON ironflow_runs (root_run_id);

CREATE TABLE IF NOT EXISTS ironflow_steps (
    run_id text NOT NULL,
    position integer NOT NULL,
    id text NOT NULL,
    name text NOT NULL,
    kind text NOT NULL,
    status text NOT NULL,
    result jsonb,
    error jsonb,
    attempts integer NOT NULL DEFAULT 0,
    child_run_id text,
    labels jsonb,
    started_at double precision NOT NULL,
    finished_at double precision,
    PRIMARY KEY (run_id, position)
);

CREATE TABLE IF NOT EXISTS ironflow_rate_limits (
    account text NOT NULL,
    "window" text NOT NULL,
    scope text NOT NULL,
    status text NOT NULL,
    utilization double precision NOT NULL,
    resets_at double precision,
    recorded_at double precision NOT NULL,
    PRIMARY KEY (account, "window", scope)
);
