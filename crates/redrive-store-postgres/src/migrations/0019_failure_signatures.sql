-- redrive PostgreSQL schema, version 19 (as SQLite version 19): failures by signature.
-- Each dead-letter record names its failure shape (signature: a hex hash of the queue,
-- reason, route kind, last outcome class, message type, source and masked description;
-- see redrive_store::failure::FailureShape) and its source (the message's `source`
-- property). failure_signatures holds each shape's fields once; failure_signature_counts
-- the aggregate per shape and area; failure_signature_hours arrivals per hour (the 24
-- newest hours of each shape and area are kept).
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
ALTER TABLE dead_letters ADD COLUMN signature text;
ALTER TABLE dead_letters ADD COLUMN source text;
CREATE INDEX dead_letters_signature ON dead_letters (queue, area, signature, id);

CREATE TABLE failure_signatures (
    id            text NOT NULL PRIMARY KEY,
    queue         text NOT NULL,
    reason        text NOT NULL,
    route_kind    text,
    outcome_class text,
    message_type  text,
    source        text,
    description   text NOT NULL
);
CREATE INDEX failure_signatures_queue ON failure_signatures (queue);

CREATE TABLE failure_signature_counts (
    signature  text   NOT NULL,
    area       text   NOT NULL,
    queue      text   NOT NULL,
    count      bigint NOT NULL,
    live       bigint NOT NULL,
    first_seen bigint NOT NULL,
    last_seen  bigint NOT NULL,
    PRIMARY KEY (signature, area)
);
CREATE INDEX failure_signature_counts_recent
    ON failure_signature_counts (area, last_seen DESC, signature);
CREATE INDEX failure_signature_counts_queue
    ON failure_signature_counts (queue, area, last_seen DESC, signature);

CREATE TABLE failure_signature_hours (
    signature text   NOT NULL,
    area      text   NOT NULL,
    queue     text   NOT NULL,
    hour      bigint NOT NULL, -- dead_lettered_at / 3600000
    count     bigint NOT NULL,
    PRIMARY KEY (signature, area, hour)
);
CREATE INDEX failure_signature_hours_queue ON failure_signature_hours (queue);

-- A record with `sig` of `queue` entered `area` (dead-lettered at `at`).
CREATE FUNCTION redrive_signature_enter(sig text, q text, a text, at bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO failure_signature_counts AS c
        (signature, area, queue, count, live, first_seen, last_seen)
    VALUES (sig, a, q, 1, 1, at, at)
    ON CONFLICT (signature, area) DO UPDATE SET
        count = c.count + 1, live = c.live + 1,
        first_seen = LEAST(c.first_seen, excluded.first_seen),
        last_seen = GREATEST(c.last_seen, excluded.last_seen);
    INSERT INTO failure_signature_hours AS h (signature, area, queue, hour, count)
    VALUES (sig, a, q, div(at, 3600000), 1)
    ON CONFLICT (signature, area, hour) DO UPDATE SET count = h.count + 1;
    DELETE FROM failure_signature_hours
    WHERE signature = sig AND area = a
      AND hour < (SELECT max(hour) FROM failure_signature_hours
                  WHERE signature = sig AND area = a) - 23;
END
$$;

CREATE FUNCTION redrive_dead_letters_signature() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.signature IS NOT NULL
       AND (TG_OP = 'DELETE' OR OLD.area <> NEW.area) THEN
        UPDATE failure_signature_counts SET live = GREATEST(live - 1, 0)
        WHERE signature = OLD.signature AND area = OLD.area;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.signature IS NOT NULL
       AND (TG_OP = 'INSERT' OR OLD.area <> NEW.area) THEN
        PERFORM redrive_signature_enter(NEW.signature, NEW.queue, NEW.area,
                                        NEW.dead_lettered_at);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER dead_letters_signature AFTER INSERT OR DELETE OR UPDATE OF area
    ON dead_letters FOR EACH ROW EXECUTE FUNCTION redrive_dead_letters_signature();

CREATE FUNCTION redrive_queue_signatures_drop() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM failure_signatures WHERE queue = OLD.name;
    DELETE FROM failure_signature_counts WHERE queue = OLD.name;
    DELETE FROM failure_signature_hours WHERE queue = OLD.name;
    RETURN NULL;
END
$$;

CREATE TRIGGER queues_signatures_drop AFTER DELETE ON queues
    FOR EACH ROW EXECUTE FUNCTION redrive_queue_signatures_drop();
