-- A grant's egress decisions ("egress denied HOST:PORT (CONNECT): reason"), kept for its step's
-- record whichever replica decided: the last ones only (the registry trims), gone with the grant.
CREATE TABLE IF NOT EXISTS ironflow.auth_proxy_egress_notes (
    seq BIGSERIAL PRIMARY KEY,
    grant_id TEXT NOT NULL REFERENCES ironflow.auth_proxy_grants (id) ON DELETE CASCADE,
    line TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT NOW()
);

CREATE INDEX IF NOT EXISTS auth_proxy_egress_notes_grant_id ON ironflow.auth_proxy_egress_notes (grant_id, seq);
