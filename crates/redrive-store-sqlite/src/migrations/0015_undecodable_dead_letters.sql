-- redrive SQLite schema: dead-letter records this build cannot read.
-- A live record whose row holds a value the shared decoders refuse (a state, quality,
-- area or JSON written by hand or by another build) is set aside by the replay claim that
-- meets it: the reason is kept here, and the claim passes over it from then on, so that
-- one such row never stops replay of the others. NULL: readable (or never looked at).
-- An operator who corrects the row clears this column, and the record is a candidate
-- again (docs/operations.md).
ALTER TABLE dead_letters ADD COLUMN undecodable TEXT;
