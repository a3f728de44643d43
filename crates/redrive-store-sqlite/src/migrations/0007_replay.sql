-- redrive SQLite schema, version 7: automatic replay of dead letters.

-- What a record's body holds: one message, or a JSON array of dead-lettered events
-- (an imported Event Grid blob). RecordFormat::as_str.
ALTER TABLE dead_letters ADD COLUMN format TEXT NOT NULL DEFAULT 'message';
-- A live record with a due time is a replay candidate (milliseconds since the epoch),
-- written in the transaction that makes it live on an entity that replays.
ALTER TABLE dead_letters ADD COLUMN replay_due_at INTEGER;
-- Failed judgements of the record, and the last one's error.
ALTER TABLE dead_letters ADD COLUMN replay_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE dead_letters ADD COLUMN last_replay_error TEXT;
-- The judgement (JSON, redrive_core::judgement::Judgement) of a quarantined or archived
-- record, and its cause by name, kept apart only to count by it.
ALTER TABLE dead_letters ADD COLUMN judgement TEXT;
ALTER TABLE dead_letters ADD COLUMN replay_cause TEXT;

-- The replay worker claims candidates by due time, across queues.
CREATE INDEX dead_letters_candidates ON dead_letters (replay_due_at, id)
    WHERE replay_due_at IS NOT NULL;
-- Retention and the drain read each queue's records by age.
CREATE INDEX dead_letters_age ON dead_letters (queue, dead_lettered_at);
