-- ironflow engine schema, version 2: the transcripts of agent steps.
-- One row is a chunk of consecutive lines of one stream (stdout: stream-json; stderr; ironflow:
-- the engine's notes) of one attempt of one step. seq numbers a run's chunks in the order they
-- were appended; the text was redacted (ironflow.secrets.redact) and size-capped before it came here.
CREATE TABLE IF NOT EXISTS ironflow_transcripts (
    run_id text NOT NULL,
    seq bigint NOT NULL,
    position integer NOT NULL,
    step text NOT NULL,
    attempt integer NOT NULL,
    stream text NOT NULL CHECK (stream IN ('stdout', 'stderr', 'ironflow')),
    content text NOT NULL,
    at double precision NOT NULL,
    PRIMARY KEY (run_id, seq)
);
