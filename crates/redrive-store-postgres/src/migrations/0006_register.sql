-- redrive PostgreSQL schema, version 6 (as SQLite version 6): the idempotency register of
-- replayable message types.

-- One entry per key: a message type, or `<queue>:*` for a queue's messages without a
-- type (see redrive_core::register). The key is collated "C" so that pages are cut
-- bytewise, as SQLite orders them.
CREATE TABLE idempotency_register (
    key                text COLLATE "C" NOT NULL PRIMARY KEY,
    answer             text   NOT NULL,              -- idempotent | not_idempotent
    ordering_attribute text,
    updated_at         bigint NOT NULL               -- milliseconds since the epoch
);
