-- redrive PostgreSQL schema, version 22 (as SQLite version 22): the failure signatures of
-- records written before version 19. Those records have no signature (NULL) and stay
-- out of the aggregate of failures. The store fills them in when it connects
-- (crate::backfill): masking a description is Rust, so each batch reads the records,
-- computes their shapes (redrive_store::failure::FailureShape, as the insert path does)
-- and sets `signature` and `source`.
--
-- Setting a signature where there was none counts the record into its area's aggregate,
-- as the insert trigger counts a new record: once, since only the change from NULL
-- fires it (the backfill's UPDATE also asks for `signature IS NULL`, which PostgreSQL
-- checks again on the row's latest version when two nodes backfill at once).
--
-- dead_letters_unsigned holds only the records still without a signature: the backfill
-- pages through them by id, and when none is left (every connect after the first)
-- finding that out is one probe of an empty index. No marker records completion: the
-- index being empty is the completion, and a backfill cut short resumes from what is
-- left.
CREATE INDEX dead_letters_unsigned ON dead_letters (id) WHERE signature IS NULL;

CREATE FUNCTION redrive_dead_letters_signature_backfill() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM redrive_signature_enter(NEW.signature, NEW.queue, NEW.area,
                                    NEW.dead_lettered_at);
    RETURN NULL;
END
$$;

CREATE TRIGGER dead_letters_signature_backfill AFTER UPDATE OF signature ON dead_letters
    FOR EACH ROW WHEN (OLD.signature IS NULL AND NEW.signature IS NOT NULL)
    EXECUTE FUNCTION redrive_dead_letters_signature_backfill();
