-- redrive PostgreSQL schema, version 18 (as SQLite version 18): case groups. A group holds
-- cases of one queue that a person works as one (one reviewed decision, many items); its
-- document (the selection, the members, the decisions) is the broker's JSON.
CREATE TABLE case_groups (
    id         text    NOT NULL PRIMARY KEY,   -- 'grp_' || ULID, time-ordered
    queue      text    NOT NULL,
    created_at bigint  NOT NULL,
    version    bigint  NOT NULL,
    doc        text    NOT NULL
);
CREATE INDEX case_groups_by_queue ON case_groups (queue, id);
