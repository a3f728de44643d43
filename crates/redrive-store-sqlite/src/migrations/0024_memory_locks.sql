-- redrive SQLite schema, version 24: message locks held in memory (crate::locks).
-- A receive on a queue without sessions keeps the lock (token, expiry, delivery count) in
-- the process, not in the row. `memory_locks` names the queues that may have locks held
-- in memory: a row is written in the transaction of a queue's first such lock and
-- removed once none is held, or at a clean close, after every held lock was written to
-- its row. A row found at open means a crash while locks were held: the queue's Available
-- messages then count one delivery more, and `count_approximate` says their count is no
-- longer exact.
CREATE TABLE memory_locks (
    queue_id INTEGER PRIMARY KEY
);
ALTER TABLE messages ADD COLUMN count_approximate INTEGER NOT NULL DEFAULT 0;
-- Empty unless a crash left approximate counts: tells at open whether a dead letter must
-- look at its row's flag at all.
CREATE INDEX messages_approximate ON messages (queue_id) WHERE count_approximate = 1;
