-- How a row's credential is sealed: 1 = AES-GCM with the row's id, credential kind and expiry as
-- associated data (a ciphertext copied into another row no longer opens); 0 = sealed before that,
-- without associated data. The registry re-seals 0 rows when it opens (and rotate-keys does too);
-- it never relays from a 0 row.
ALTER TABLE ironflow.auth_proxy_grants
    ADD COLUMN IF NOT EXISTS seal_format SMALLINT NOT NULL DEFAULT 0;
