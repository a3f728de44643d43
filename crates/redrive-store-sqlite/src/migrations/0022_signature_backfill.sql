-- redrive SQLite schema, version 22: the failure signatures of records written before
-- version 19. Those records have no signature (NULL) and stay out of the aggregate of
-- failures. The store fills them in when it opens (crate::backfill): masking a
-- description is Rust, so each batch reads the records, computes their shapes
-- (redrive_store::failure::FailureShape, as the insert path does) and sets `signature`
-- and `source`.
--
-- Setting a signature where there was none counts the record into its area's aggregate,
-- as the insert trigger counts a new record: once, since only the change from NULL
-- fires it (the backfill's UPDATE also asks for `signature IS NULL`). Count, live,
-- first/last seen and the hour of its dead-lettering grow by one.
--
-- dead_letters_unsigned holds only the records still without a signature: the backfill
-- pages through them by id, and when none is left (every open after the first) finding
-- that out is one probe of an empty index. No marker records completion: the index being
-- empty is the completion, and a backfill cut short resumes from what is left.
CREATE INDEX dead_letters_unsigned ON dead_letters (id) WHERE signature IS NULL;

CREATE TRIGGER dead_letters_signature_backfill AFTER UPDATE OF signature ON dead_letters
WHEN old.signature IS NULL AND new.signature IS NOT NULL
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
