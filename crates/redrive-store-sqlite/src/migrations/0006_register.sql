-- redrive SQLite schema, version 6: the idempotency register of replayable message types.

-- One entry per key: a message type, or `<queue>:*` for a queue's messages without a
-- type (see redrive_core::register). Keys compare bytewise (BINARY), as pages are cut.
CREATE TABLE idempotency_register (
    key                TEXT    NOT NULL PRIMARY KEY,
    answer             TEXT    NOT NULL,             -- idempotent | not_idempotent
    ordering_attribute TEXT,
    updated_at         INTEGER NOT NULL              -- milliseconds since the epoch
);
