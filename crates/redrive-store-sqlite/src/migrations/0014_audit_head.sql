-- redrive SQLite schema: the audit chain's head (see redrive_core::audit::ChainHead).
-- The newest entry's number and hash, kept apart from the entries and written in the
-- same transaction as every append and retention pass; appends chain to it rather than
-- to the newest row, so removing the newest entries leaves the head naming an entry that
-- is gone. One row, always; a database without it refuses to append.

CREATE TABLE audit_head (
    id   INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    seq  INTEGER NOT NULL,
    hash TEXT    NOT NULL
);
INSERT INTO audit_head (id, seq, hash)
SELECT 1,
       coalesce((SELECT seq FROM audit_log ORDER BY seq DESC LIMIT 1), 0),
       coalesce((SELECT hash FROM audit_log ORDER BY seq DESC LIMIT 1),
                '0000000000000000000000000000000000000000000000000000000000000000');
