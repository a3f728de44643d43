-- redrive SQLite schema, version 23: a new dead-letter record is counted into its failure
-- signature's aggregate by the statement that inserts it (crate::rows::insert_record)
-- rather than by a trigger. The counts are the trigger's, to the row: count, live,
-- first/last seen, the hour of its dead-lettering, the hours older than the latest 24
-- dropped. A trigger makes SQLite keep a statement journal of every page the insert and
-- the trigger's statements touch; three statements of one row each need none. Moves,
-- deletes and the backfill keep their triggers (version 19 and 22).
DROP TRIGGER dead_letters_signature_enter;
