-- redrive PostgreSQL schema, version 9 (as SQLite version 9): message move tasks, kept
-- in the store so that every node sees them and a task outlives the node that runs it.

CREATE TABLE move_tasks (
    handle         text   NOT NULL PRIMARY KEY,        -- mv_ and 32 hex digits
    seq            bigint GENERATED ALWAYS AS IDENTITY, -- creation order (ties of started_at)
    source         text   NOT NULL,
    destination    text,                               -- NULL: back to each message's source
    max_per_second bigint,
    status         text   NOT NULL,                    -- RUNNING | COMPLETED | CANCELLING | CANCELLED | FAILED
    moved          bigint NOT NULL,
    to_move        bigint NOT NULL,
    failure_reason text,
    owner_id       text   NOT NULL,                    -- the actor whose authority it runs on
    owner_name     text   NOT NULL,
    started_at     bigint NOT NULL,                    -- milliseconds since the epoch
    updated_at     bigint NOT NULL,
    runner         text,                               -- the node running it
    runner_until   bigint                              -- its heartbeat lease
);
-- One active task per source.
CREATE UNIQUE INDEX move_tasks_active ON move_tasks (source)
    WHERE status IN ('RUNNING', 'CANCELLING');
CREATE INDEX move_tasks_by_source ON move_tasks (source, started_at, seq);
