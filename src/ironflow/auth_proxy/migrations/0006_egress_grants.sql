-- Egress-only grants (a pod's HTTPS_PROXY password): credential kind 'egress', no credential behind
-- it (the sealed value is empty, bound to the row like any other), and always a policy.
ALTER TABLE ironflow.auth_proxy_grants
    DROP CONSTRAINT IF EXISTS auth_proxy_grants_credential_kind_check;
ALTER TABLE ironflow.auth_proxy_grants
    ADD CONSTRAINT auth_proxy_grants_credential_kind_check
        CHECK (credential_kind IN ('oauth_token', 'api_key', 'secret', 'egress'));
ALTER TABLE ironflow.auth_proxy_grants
    ADD CONSTRAINT auth_proxy_grants_egress_kind_has_policy
        CHECK (credential_kind <> 'egress' OR egress IS NOT NULL);
