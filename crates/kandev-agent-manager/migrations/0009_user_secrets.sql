-- The operator's credentials (credential mounts, the host's GITHUB_TOKEN and
-- the like) reach a type's agents only when an admin opts the type in.
ALTER TABLE agent_types ADD COLUMN host_credentials boolean NOT NULL DEFAULT false;

-- Each user's own credentials for their agents, encrypted (AES-256-GCM; the
-- nonce is stored beside the ciphertext, scope and name are bound as
-- associated data so a row cannot be moved to another user or name).
CREATE TABLE user_secrets (
    scope       text        NOT NULL,
    name        text        NOT NULL,
    nonce       bytea       NOT NULL,
    ciphertext  bytea       NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, name)
);
