-- redrive PostgreSQL schema, version 12 (as SQLite version 12): the cases of a queue by
-- reason and dead-letter time. Whether a failure persists on a replay plan's destination
-- (a case of that queue with the items' reason dead-lettered within the last minutes) is
-- asked at every admission look: answered from this index alone, not by reading every
-- case of the queue.

CREATE INDEX IF NOT EXISTS cases_queue_reason_age ON cases (queue, reason, dead_lettered_at);
