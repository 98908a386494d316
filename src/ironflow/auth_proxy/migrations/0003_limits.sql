-- Per-token limits fixed at issue time, and what the token has used so far.
ALTER TABLE ironflow.auth_proxy_grants
    ADD COLUMN IF NOT EXISTS limits JSONB NULL,
    ADD COLUMN IF NOT EXISTS requests_used BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS output_tokens_used BIGINT NOT NULL DEFAULT 0;
