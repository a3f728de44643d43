-- redrive SQLite schema, version 4: a message's contents (body and the other columns
-- written once at enqueue and only read back) move to their own table, so that the
-- updates of receive and settlement rewrite small rows (tens per page) rather than rows
-- that carry the body. The messages table gets an explicit INTEGER PRIMARY KEY (its
-- rowid, kept as it was: lock tokens carry it), which message_bodies is keyed by.

CREATE TABLE message_bodies (
    id             INTEGER PRIMARY KEY,         -- messages.id
    body           BLOB    NOT NULL,
    content_type   TEXT,
    properties     TEXT,                        -- Properties as JSON; NULL when empty
    correlation_id TEXT,
    message_type   TEXT,
    intent         TEXT
);
INSERT INTO message_bodies (id, body, content_type, properties, correlation_id, message_type,
                            intent)
    SELECT rowid, body, content_type, properties, correlation_id, message_type, intent
    FROM messages;

CREATE TABLE messages_v4 (
    id                 INTEGER PRIMARY KEY,     -- the rowid; message_bodies.id
    queue_id           INTEGER NOT NULL,        -- queues.id
    sequence           INTEGER NOT NULL,
    message_id         TEXT    NOT NULL,
    session_id         TEXT,
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
    UNIQUE (queue_id, sequence)
);
INSERT INTO messages_v4 (id, queue_id, sequence, message_id, session_id, valid_until,
                         enqueued_at, scheduled_at, state, visible_at, expires_at,
                         delivery_count, lock_token, locked_until, deferred,
                         first_delivered_at, last_delivered_at)
    SELECT rowid, queue_id, sequence, message_id, session_id, valid_until, enqueued_at,
           scheduled_at, state, visible_at, expires_at, delivery_count, lock_token,
           locked_until, deferred, first_delivered_at, last_delivered_at
    FROM messages;
DROP TABLE messages;
ALTER TABLE messages_v4 RENAME TO messages;

CREATE INDEX messages_due ON messages (queue_id, state, due_at, sequence);
CREATE INDEX messages_expiry ON messages (queue_id, expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX messages_session ON messages (queue_id, session_id, sequence)
    WHERE session_id IS NOT NULL;

-- A message's contents go with it, in the statement that deletes it (every path: settle,
-- expiry, dead-lettering, cancelling, deleting a queue).
CREATE TRIGGER messages_delete_body AFTER DELETE ON messages
BEGIN
    DELETE FROM message_bodies WHERE id = old.id;
END;
