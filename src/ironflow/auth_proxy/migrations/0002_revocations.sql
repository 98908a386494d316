-- Tombstones: a revoked token reads "revoked" (not "unknown") until its grant would have expired.
CREATE TABLE IF NOT EXISTS ironflow.auth_proxy_revocations (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    revoked_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT NOW()
);

CREATE INDEX IF NOT EXISTS auth_proxy_revocations_expires_at ON ironflow.auth_proxy_revocations (expires_at);
