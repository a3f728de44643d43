-- redrive PostgreSQL schema, version 4: sequence numbers come from a PostgreSQL sequence
-- per queue (queue_seq_<id>, in the queues table's schema) instead of the queue row's
-- counter. nextval() neither waits nor is undone by a rollback, so senders of one queue
-- no longer queue on its row; numbers stay unique and increasing per queue, and a
-- rolled-back send leaves a gap. Where order is promised (one session or message group),
-- senders serialise on an advisory lock per (queue, session) before drawing.

CREATE FUNCTION redrive_queue_sequence_create() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('CREATE SEQUENCE %I.%I AS bigint MINVALUE 1 START 1',
                   TG_TABLE_SCHEMA, 'queue_seq_' || NEW.id);
    RETURN NULL;
END
$$;

CREATE FUNCTION redrive_queue_sequence_drop() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('DROP SEQUENCE IF EXISTS %I.%I', TG_TABLE_SCHEMA, 'queue_seq_' || OLD.id);
    RETURN NULL;
END
$$;

CREATE TRIGGER queues_sequence_create AFTER INSERT ON queues
    FOR EACH ROW EXECUTE FUNCTION redrive_queue_sequence_create();
CREATE TRIGGER queues_sequence_drop AFTER DELETE ON queues
    FOR EACH ROW EXECUTE FUNCTION redrive_queue_sequence_drop();

-- Existing queues continue where their counter stood.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT id, next_sequence FROM queues LOOP
        EXECUTE format('CREATE SEQUENCE %I.%I AS bigint MINVALUE 1 START %s',
                       current_schema(), 'queue_seq_' || r.id, r.next_sequence);
    END LOOP;
END
$$;

-- The counter is gone, so a node of an older version cannot hand out numbers the
-- sequences hand out too: its sends fail instead.
ALTER TABLE queues DROP COLUMN next_sequence;
