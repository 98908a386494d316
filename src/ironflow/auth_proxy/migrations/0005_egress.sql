-- A grant's egress policy (the allow and deny rules its egress proxy applies), in clear: it names
-- hosts, never a credential. NULL: the grant's egress proxy lets nothing through.
ALTER TABLE ironflow.auth_proxy_grants
    ADD COLUMN IF NOT EXISTS egress JSONB NULL;
