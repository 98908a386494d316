-- Grants: one row per live token, keyed by the SHA-256 of the token (never the token).
CREATE SCHEMA IF NOT EXISTS ironflow;

CREATE TABLE IF NOT EXISTS ironflow.auth_proxy_grants (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    step TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    credential_kind TEXT NOT NULL CHECK (credential_kind IN ('oauth_token', 'api_key', 'secret')),
    secret_spec JSONB NULL,
    encrypted_credential BYTEA NOT NULL,
    nonce BYTEA NOT NULL,
    key_version INT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    CHECK ((credential_kind = 'secret') = (secret_spec IS NOT NULL))
);

CREATE INDEX IF NOT EXISTS auth_proxy_grants_run_id ON ironflow.auth_proxy_grants (run_id);
CREATE INDEX IF NOT EXISTS auth_proxy_grants_expires_at ON ironflow.auth_proxy_grants (expires_at);
