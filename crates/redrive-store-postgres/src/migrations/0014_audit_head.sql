-- redrive PostgreSQL schema (as the SQLite migration of the same file name): the audit
-- chain's head (see redrive_core::audit::ChainHead). The newest entry's number and hash,
-- on the chain's one row that every append and retention pass already locks, written in
-- the same transaction; appends chain to it rather than to the newest row, so removing
-- the newest entries leaves the head naming an entry that is gone.

ALTER TABLE audit_chain
    ADD COLUMN head_seq  bigint NOT NULL DEFAULT 0,
    ADD COLUMN head_hash text   NOT NULL
        DEFAULT '0000000000000000000000000000000000000000000000000000000000000000';
UPDATE audit_chain
   SET head_seq = newest.seq, head_hash = newest.hash
  FROM (SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1) AS newest;
