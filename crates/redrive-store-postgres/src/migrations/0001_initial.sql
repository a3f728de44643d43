-- redrive PostgreSQL schema, version 1 (the same model as the SQLite schema, version 1).
-- All times are milliseconds since the Unix epoch (UTC), as bigint; no column reads the
-- database clock. JSON columns hold serde_json text. The hot tables (messages, dedup,
-- sessions) key rows by the queue's integer id, which keeps their indexes small;
-- dead-letter records, which people read, name the queue.

CREATE TABLE queues (
    id             bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- never reused
    name           text    NOT NULL UNIQUE,
    policy         text    NOT NULL,             -- QueuePolicy as JSON
    policy_version bigint  NOT NULL,
    created_at     bigint  NOT NULL,
    updated_at     bigint  NOT NULL,
    -- The next sequence number to hand out. Senders update it in their transaction,
    -- which serialises them per queue and makes sequence order commit order.
    next_sequence  bigint  NOT NULL DEFAULT 1
);

CREATE TABLE messages (
    queue_id           bigint  NOT NULL,         -- queues.id
    sequence           bigint  NOT NULL,
    message_id         text    NOT NULL,
    body               bytea   NOT NULL,
    content_type       text,
    properties         text,                     -- Properties as JSON; NULL when empty
    correlation_id     text,
    session_id         text,
    message_type       text,
    intent             text,
    valid_until        bigint,
    enqueued_at        bigint  NOT NULL,
    scheduled_at       bigint,
    state              text    NOT NULL,         -- MessageState::as_str
    visible_at         bigint  NOT NULL,
    expires_at         bigint,
    delivery_count     bigint  NOT NULL DEFAULT 0,
    lock_token         text,
    locked_until       bigint,
    deferred           boolean NOT NULL DEFAULT false,
    first_delivered_at bigint,
    last_delivered_at  bigint,
    -- When the row next matters: an Available message becomes visible, a Locked one's
    -- lock runs out. One index over it serves receive, lock expiry and wake-up times.
    due_at             bigint  GENERATED ALWAYS AS
                           (CASE WHEN state = 'locked' THEN locked_until ELSE visible_at END)
                           STORED,
    PRIMARY KEY (queue_id, sequence)
);

-- Receive (state 'available', due_at <= now, oldest first), lock expiry (state 'locked',
-- due_at <= now), next wake-up, counts. A lock token carries its message's sequence
-- number, so settlement finds the row by its primary key and needs no index of its own.
CREATE INDEX messages_due ON messages (queue_id, state, due_at, sequence);
-- Message expiry (sweep, receive).
CREATE INDEX messages_expiry ON messages (queue_id, expires_at) WHERE expires_at IS NOT NULL;
-- Sessions: one session's messages in order.
CREATE INDEX messages_session ON messages (queue_id, session_id, sequence)
    WHERE session_id IS NOT NULL;

CREATE TABLE dedup (
    queue_id   bigint NOT NULL,
    message_id text   NOT NULL,
    sequence   bigint NOT NULL,
    expires_at bigint NOT NULL,                  -- end of the detection window
    PRIMARY KEY (queue_id, message_id)
);
CREATE INDEX dedup_expiry ON dedup (expires_at);

CREATE TABLE sessions (
    queue_id     bigint NOT NULL,
    session_id   text   NOT NULL,
    lock_token   text   NOT NULL,
    locked_until bigint NOT NULL,
    PRIMARY KEY (queue_id, session_id)
);
CREATE INDEX sessions_expiry ON sessions (locked_until);

CREATE TABLE dead_letters (
    id                 text    NOT NULL PRIMARY KEY,
    queue              text    NOT NULL,         -- queues.name
    area               text    NOT NULL,         -- Area::as_str
    message_id         text    NOT NULL,
    sequence           bigint  NOT NULL,
    session_id         text,
    body               bytea   NOT NULL,
    body_sha256        text    NOT NULL,
    content_type       text,
    properties         text,
    correlation_id     text,
    message_type       text,
    intent             text,
    valid_until        bigint,
    reason             text    NOT NULL,
    description        text,
    delivery_count     bigint  NOT NULL,
    count_quality      text    NOT NULL,         -- EvidenceQuality::as_str
    first_delivered_at bigint,
    last_delivered_at  bigint,
    enqueued_at        bigint  NOT NULL,
    dead_lettered_at   bigint  NOT NULL,
    policy_version     bigint  NOT NULL,
    route              text    NOT NULL,         -- RouteKind::as_str
    forwarded_queue    text,
    forwarded_sequence bigint,
    dlq_delivery_count bigint  NOT NULL DEFAULT 0,
    lock_token         text,
    locked_until       bigint
);
CREATE INDEX dead_letters_area ON dead_letters (queue, area, id);
CREATE UNIQUE INDEX dead_letters_lock_token ON dead_letters (lock_token)
    WHERE lock_token IS NOT NULL;
