-- redrive PostgreSQL schema, version 5 (as SQLite version 5): API tokens and the audit log.

-- A token: only the SHA-256 of its secret is kept. Its name is unique among the tokens
-- that are not revoked, so a revoked token's name can be given again.
CREATE TABLE tokens (
    id                text   NOT NULL PRIMARY KEY,   -- tok_ and 16 hex digits
    name              text   NOT NULL,
    secret_hash       text   NOT NULL UNIQUE,        -- SHA-256 of the secret, lowercase hex
    grants            text   NOT NULL,               -- JSON array of grants in text form
    created_by        text   NOT NULL,
    created_at        bigint NOT NULL,               -- milliseconds since the epoch
    expires_at        bigint,
    revoked_at        bigint,
    sqs_access_key_id text   UNIQUE,                 -- NULL: no SQS credentials
    sqs_secret        text
);
CREATE UNIQUE INDEX tokens_active_name ON tokens (name) WHERE revoked_at IS NULL;

-- The audit log: every entry chained to the one before by its hash (see
-- redrive_core::audit). Retention always keeps the newest entry, so max(seq) never goes
-- back.
CREATE TABLE audit_log (
    seq        bigint NOT NULL PRIMARY KEY,
    at         bigint NOT NULL,                      -- milliseconds since the epoch
    actor_id   text   NOT NULL,
    actor_name text   NOT NULL,
    action     text   NOT NULL,
    entity     text,
    targets    text   NOT NULL,                      -- JSON array of strings
    outcome    text   NOT NULL,
    client     text,
    prev_hash  text   NOT NULL,
    hash       text   NOT NULL
);
CREATE INDEX audit_log_actor ON audit_log (actor_id, seq);
CREATE INDEX audit_log_entity ON audit_log (entity, seq);
CREATE INDEX audit_log_action ON audit_log (action, seq);
CREATE INDEX audit_log_at ON audit_log (at);

-- The chain's head: appends and retention passes on every node lock this one row first,
-- so they run one at a time and each reads the newest entry the one before committed.
CREATE TABLE audit_chain (
    id boolean NOT NULL PRIMARY KEY DEFAULT true CHECK (id)
);
INSERT INTO audit_chain (id) VALUES (true);
