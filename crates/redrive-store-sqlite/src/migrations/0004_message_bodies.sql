-- redrive SQLite schema, version 4: large message contents in their own table.
-- Receive and settlement update a message's state columns, and SQLite rewrites the whole
-- record (and writes its pages to the WAL) for that. A message whose body and properties
-- together exceed 512 bytes keeps its contents (body, content type, properties,
-- correlation id, type, intent) in message_bodies, so that its row in messages stays
-- small (tens per page); smaller contents stay in the row (body not NULL), which spares
-- them a second insert and lookup. The messages table gets an explicit INTEGER PRIMARY
-- KEY (its rowid, kept as it was: lock tokens carry it), which message_bodies is keyed by.

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
    FROM messages
    WHERE length(body) + coalesce(length(CAST(properties AS BLOB)), 0) > 512;

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
    -- The contents when small; all NULL (body included) when they are in message_bodies.
    body               BLOB,
    content_type       TEXT,
    properties         TEXT,                    -- Properties as JSON; NULL when empty
    correlation_id     TEXT,
    message_type       TEXT,
    intent             TEXT,
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
                         first_delivered_at, last_delivered_at, body, content_type,
                         properties, correlation_id, message_type, intent)
    SELECT o.rowid, o.queue_id, o.sequence, o.message_id, o.session_id, o.valid_until,
           o.enqueued_at, o.scheduled_at, o.state, o.visible_at, o.expires_at,
           o.delivery_count, o.lock_token, o.locked_until, o.deferred,
           o.first_delivered_at, o.last_delivered_at,
           iif(b.id IS NULL, o.body, NULL), iif(b.id IS NULL, o.content_type, NULL),
           iif(b.id IS NULL, o.properties, NULL), iif(b.id IS NULL, o.correlation_id, NULL),
           iif(b.id IS NULL, o.message_type, NULL), iif(b.id IS NULL, o.intent, NULL)
    FROM messages o LEFT JOIN message_bodies b ON b.id = o.rowid;
DROP TABLE messages;
ALTER TABLE messages_v4 RENAME TO messages;

CREATE INDEX messages_due ON messages (queue_id, state, due_at, sequence);
CREATE INDEX messages_expiry ON messages (queue_id, expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX messages_session ON messages (queue_id, session_id, sequence)
    WHERE session_id IS NOT NULL;

-- Contents kept apart go with their message, in the statement that deletes it (every
-- path: settle, expiry, dead-lettering, cancelling, deleting a queue).
CREATE TRIGGER messages_delete_body AFTER DELETE ON messages WHEN old.body IS NULL
BEGIN
    DELETE FROM message_bodies WHERE id = old.id;
END;
