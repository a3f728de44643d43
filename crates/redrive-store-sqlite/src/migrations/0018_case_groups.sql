-- redrive SQLite schema, version 18: case groups. A group holds cases of one queue that a
-- person works as one (one reviewed decision, many items); its document (the selection,
-- the members, the decisions) is the broker's JSON.
CREATE TABLE case_groups (
    id         TEXT    NOT NULL PRIMARY KEY,   -- 'grp_' || ULID, time-ordered
    queue      TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    version    INTEGER NOT NULL,
    doc        TEXT    NOT NULL
);
CREATE INDEX case_groups_by_queue ON case_groups (queue, id);
