-- redrive SQLite schema, version 9: message move tasks, kept in the store so that every
-- node sees them and a task outlives the node that runs it.

CREATE TABLE move_tasks (
    handle         TEXT    NOT NULL PRIMARY KEY,       -- mv_ and 32 hex digits
    seq            INTEGER NOT NULL,                   -- creation order (ties of started_at)
    source         TEXT    NOT NULL,
    destination    TEXT,                               -- NULL: back to each message's source
    max_per_second INTEGER,
    status         TEXT    NOT NULL,                   -- RUNNING | COMPLETED | CANCELLING | CANCELLED | FAILED
    moved          INTEGER NOT NULL,
    to_move        INTEGER NOT NULL,
    failure_reason TEXT,
    owner_id       TEXT    NOT NULL,                   -- the actor whose authority it runs on
    owner_name     TEXT    NOT NULL,
    started_at     INTEGER NOT NULL,                   -- milliseconds since the epoch
    updated_at     INTEGER NOT NULL,
    runner         TEXT,                               -- the node running it
    runner_until   INTEGER                             -- its heartbeat lease
);
-- One active task per source.
CREATE UNIQUE INDEX move_tasks_active ON move_tasks (source)
    WHERE status IN ('RUNNING', 'CANCELLING');
CREATE INDEX move_tasks_by_source ON move_tasks (source, started_at, seq);
