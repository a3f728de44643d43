-- redrive SQLite schema, version 5: API tokens and the audit log.

-- A token: only the SHA-256 of its secret is kept. Its name is unique among the tokens
-- that are not revoked, so a revoked token's name can be given again.
CREATE TABLE tokens (
    id                TEXT    NOT NULL PRIMARY KEY,  -- tok_ and 16 hex digits
    name              TEXT    NOT NULL,
    secret_hash       TEXT    NOT NULL UNIQUE,       -- SHA-256 of the secret, lowercase hex
    grants            TEXT    NOT NULL,              -- JSON array of grants in text form
    created_by        TEXT    NOT NULL,
    created_at        INTEGER NOT NULL,              -- milliseconds since the epoch
    expires_at        INTEGER,
    revoked_at        INTEGER,
    sqs_access_key_id TEXT    UNIQUE,                -- NULL: no SQS credentials
    sqs_secret        TEXT
);
CREATE UNIQUE INDEX tokens_active_name ON tokens (name) WHERE revoked_at IS NULL;

-- The audit log: every entry chained to the one before by its hash (see
-- redrive_core::audit). seq is the rowid; it only grows (retention always keeps the
-- newest entry, so max(seq) never goes back).
CREATE TABLE audit_log (
    seq        INTEGER PRIMARY KEY,
    at         INTEGER NOT NULL,                     -- milliseconds since the epoch
    actor_id   TEXT    NOT NULL,
    actor_name TEXT    NOT NULL,
    action     TEXT    NOT NULL,
    entity     TEXT,
    targets    TEXT    NOT NULL,                     -- JSON array of strings
    outcome    TEXT    NOT NULL,
    client     TEXT,
    prev_hash  TEXT    NOT NULL,
    hash       TEXT    NOT NULL
);
CREATE INDEX audit_log_actor ON audit_log (actor_id, seq);
CREATE INDEX audit_log_entity ON audit_log (entity, seq);
CREATE INDEX audit_log_action ON audit_log (action, seq);
CREATE INDEX audit_log_at ON audit_log (at);
