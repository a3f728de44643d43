-- redrive PostgreSQL schema, version 2 (as SQLite version 2): leases for work that runs
-- on one process at a time.
CREATE TABLE leases (
    name       text   NOT NULL PRIMARY KEY,
    holder     text   NOT NULL,
    expires_at bigint NOT NULL                   -- milliseconds since the epoch
);
