-- redrive SQLite schema, version 1.
-- All times are milliseconds since the Unix epoch (UTC). JSON columns hold serde_json text.
-- The hot tables (messages, dedup, sessions) key rows by the queue's integer id, which
-- keeps their indexes small; dead-letter records, which people read, name the queue.

CREATE TABLE queues (
    id             INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused
    name           TEXT    NOT NULL UNIQUE,
    policy         TEXT    NOT NULL,            -- QueuePolicy as JSON
    policy_version INTEGER NOT NULL,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    next_sequence  INTEGER NOT NULL DEFAULT 1   -- next sequence number to hand out
);

CREATE TABLE messages (
    queue_id           INTEGER NOT NULL,        -- queues.id
    sequence           INTEGER NOT NULL,
    message_id         TEXT    NOT NULL,
    body               BLOB    NOT NULL,
    content_type       TEXT,
    properties         TEXT,                    -- Properties as JSON; NULL when empty
    correlation_id     TEXT,
    session_id         TEXT,
    message_type       TEXT,
    intent             TEXT,
    valid_until        INTEGER,
    enqueued_at        INTEGER NOT NULL,
    scheduled_at       INTEGER,
    state              TEXT    NOT NULL,        -- MessageState::as_str
    visible_at         INTEGER NOT NULL,
    expires_at         INTEGER,
    delivery_count     INTEGER NOT NULL DEFAULT 0,
    lock_token         TEXT,
    locked_until       INTEGER,
    deferred           INTEGER NOT NULL DEFAULT 0,
    first_delivered_at INTEGER,
    last_delivered_at  INTEGER,
    -- When the row next matters: an Available message becomes visible, a Locked one's
    -- lock runs out. One index over it serves receive, lock expiry and wake-up times.
    due_at             INTEGER GENERATED ALWAYS AS
                           (CASE WHEN state = 'locked' THEN locked_until ELSE visible_at END)
                           VIRTUAL,
    PRIMARY KEY (queue_id, sequence)
);

-- Receive (state 'available', due_at <= now, oldest first), lock expiry (state 'locked',
-- due_at <= now), next wake-up, counts. A lock token carries its row's rowid, so
-- settlement finds the row by rowid and needs no index of its own.
CREATE INDEX messages_due ON messages (queue_id, state, due_at, sequence);
-- Message expiry (sweep, receive).
CREATE INDEX messages_expiry ON messages (queue_id, expires_at) WHERE expires_at IS NOT NULL;
-- Sessions: one session's messages in order.
CREATE INDEX messages_session ON messages (queue_id, session_id, sequence)
    WHERE session_id IS NOT NULL;

CREATE TABLE dedup (
    queue_id   INTEGER NOT NULL,
    message_id TEXT    NOT NULL,
    sequence   INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,                -- end of the detection window
    PRIMARY KEY (queue_id, message_id)
);
CREATE INDEX dedup_expiry ON dedup (expires_at);

CREATE TABLE sessions (
    queue_id     INTEGER NOT NULL,
    session_id   TEXT    NOT NULL,
    lock_token   TEXT    NOT NULL,
    locked_until INTEGER NOT NULL,
    PRIMARY KEY (queue_id, session_id)
);
CREATE INDEX sessions_expiry ON sessions (locked_until);

CREATE TABLE dead_letters (
    id                 TEXT    NOT NULL PRIMARY KEY,
    queue              TEXT    NOT NULL,        -- queues.name
    area               TEXT    NOT NULL,        -- Area::as_str
    message_id         TEXT    NOT NULL,
    sequence           INTEGER NOT NULL,
    session_id         TEXT,
    body               BLOB    NOT NULL,
    body_sha256        TEXT    NOT NULL,
    content_type       TEXT,
    properties         TEXT,
    correlation_id     TEXT,
    message_type       TEXT,
    intent             TEXT,
    valid_until        INTEGER,
    reason             TEXT    NOT NULL,
    description        TEXT,
    delivery_count     INTEGER NOT NULL,
    count_quality      TEXT    NOT NULL,        -- EvidenceQuality::as_str
    first_delivered_at INTEGER,
    last_delivered_at  INTEGER,
    enqueued_at        INTEGER NOT NULL,
    dead_lettered_at   INTEGER NOT NULL,
    policy_version     INTEGER NOT NULL,
    route              TEXT    NOT NULL,        -- RouteKind::as_str
    forwarded_queue    TEXT,
    forwarded_sequence INTEGER,
    dlq_delivery_count INTEGER NOT NULL DEFAULT 0,
    lock_token         TEXT,
    locked_until       INTEGER
);
CREATE INDEX dead_letters_area ON dead_letters (queue, area, id);
CREATE UNIQUE INDEX dead_letters_lock_token ON dead_letters (lock_token) WHERE lock_token IS NOT NULL;
