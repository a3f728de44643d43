-- redrive SQLite schema, version 19: failures by signature. Each dead-letter record names
-- its failure shape (signature: a hex hash of the queue, reason, route kind, last outcome
-- class, message type, source and masked description; see
-- redrive_store::failure::FailureShape) and its source (the message's `source` property).
-- failure_signatures holds each shape's fields once; failure_signature_counts the
-- aggregate per shape and area; failure_signature_hours arrivals per hour (the 24 newest
-- hours of each shape and area are kept).
--
-- The triggers keep the aggregate on every path that writes, moves or deletes a record:
--   count      records that entered the area with this signature (written there, or
--              moved in), never decremented;
--   live       records in the area now (decremented when one leaves the area: moved,
--              settled, expired, replayed, deleted);
--   first_seen, last_seen   the earliest and latest dead_lettered_at of those records;
--   hours      per hour of dead_lettered_at, the records that entered.
-- Deleting a queue deletes its signatures.
--
-- Rows written before this version have no signature (NULL) and stay out of the
-- aggregate: masking a description is Rust (redrive_core::case::signature), not SQL.
ALTER TABLE dead_letters ADD COLUMN signature TEXT;
ALTER TABLE dead_letters ADD COLUMN source TEXT;
CREATE INDEX dead_letters_signature ON dead_letters (queue, area, signature, id);

CREATE TABLE failure_signatures (
    id            TEXT NOT NULL PRIMARY KEY,
    queue         TEXT NOT NULL,
    reason        TEXT NOT NULL,
    route_kind    TEXT,
    outcome_class TEXT,
    message_type  TEXT,
    source        TEXT,
    description   TEXT NOT NULL
);
CREATE INDEX failure_signatures_queue ON failure_signatures (queue);

CREATE TABLE failure_signature_counts (
    signature  TEXT    NOT NULL,
    area       TEXT    NOT NULL,
    queue      TEXT    NOT NULL,
    count      INTEGER NOT NULL,
    live       INTEGER NOT NULL,
    first_seen INTEGER NOT NULL,
    last_seen  INTEGER NOT NULL,
    PRIMARY KEY (signature, area)
);
CREATE INDEX failure_signature_counts_recent
    ON failure_signature_counts (area, last_seen DESC, signature);
CREATE INDEX failure_signature_counts_queue
    ON failure_signature_counts (queue, area, last_seen DESC, signature);

CREATE TABLE failure_signature_hours (
    signature TEXT    NOT NULL,
    area      TEXT    NOT NULL,
    queue     TEXT    NOT NULL,
    hour      INTEGER NOT NULL, -- dead_lettered_at / 3600000
    count     INTEGER NOT NULL,
    PRIMARY KEY (signature, area, hour)
);
CREATE INDEX failure_signature_hours_queue ON failure_signature_hours (queue);

CREATE TRIGGER dead_letters_signature_enter AFTER INSERT ON dead_letters
WHEN new.signature IS NOT NULL
BEGIN
    INSERT INTO failure_signature_counts
        (signature, area, queue, count, live, first_seen, last_seen)
    VALUES (new.signature, new.area, new.queue, 1, 1, new.dead_lettered_at,
            new.dead_lettered_at)
    ON CONFLICT (signature, area) DO UPDATE SET
        count = count + 1, live = live + 1,
        first_seen = min(first_seen, excluded.first_seen),
        last_seen = max(last_seen, excluded.last_seen);
    INSERT INTO failure_signature_hours (signature, area, queue, hour, count)
    VALUES (new.signature, new.area, new.queue, new.dead_lettered_at / 3600000, 1)
    ON CONFLICT (signature, area, hour) DO UPDATE SET count = count + 1;
    DELETE FROM failure_signature_hours
    WHERE signature = new.signature AND area = new.area
      AND hour < (SELECT max(hour) FROM failure_signature_hours
                  WHERE signature = new.signature AND area = new.area) - 23;
END;

CREATE TRIGGER dead_letters_signature_move AFTER UPDATE OF area ON dead_letters
WHEN new.signature IS NOT NULL AND old.area <> new.area
BEGIN
    UPDATE failure_signature_counts SET live = max(live - 1, 0)
    WHERE signature = old.signature AND area = old.area;
    INSERT INTO failure_signature_counts
        (signature, area, queue, count, live, first_seen, last_seen)
    VALUES (new.signature, new.area, new.queue, 1, 1, new.dead_lettered_at,
            new.dead_lettered_at)
    ON CONFLICT (signature, area) DO UPDATE SET
        count = count + 1, live = live + 1,
        first_seen = min(first_seen, excluded.first_seen),
        last_seen = max(last_seen, excluded.last_seen);
    INSERT INTO failure_signature_hours (signature, area, queue, hour, count)
    VALUES (new.signature, new.area, new.queue, new.dead_lettered_at / 3600000, 1)
    ON CONFLICT (signature, area, hour) DO UPDATE SET count = count + 1;
    DELETE FROM failure_signature_hours
    WHERE signature = new.signature AND area = new.area
      AND hour < (SELECT max(hour) FROM failure_signature_hours
                  WHERE signature = new.signature AND area = new.area) - 23;
END;

CREATE TRIGGER dead_letters_signature_leave AFTER DELETE ON dead_letters
WHEN old.signature IS NOT NULL
BEGIN
    UPDATE failure_signature_counts SET live = max(live - 1, 0)
    WHERE signature = old.signature AND area = old.area;
END;

CREATE TRIGGER queues_signatures_drop AFTER DELETE ON queues
BEGIN
    DELETE FROM failure_signatures WHERE queue = old.name;
    DELETE FROM failure_signature_counts WHERE queue = old.name;
    DELETE FROM failure_signature_hours WHERE queue = old.name;
END;
