-- redrive SQLite schema, version 2: leases for work that runs on one process at a time.
CREATE TABLE leases (
    name         TEXT    NOT NULL PRIMARY KEY,
    holder       TEXT    NOT NULL,
    expires_at   INTEGER NOT NULL             -- milliseconds since the epoch
);
