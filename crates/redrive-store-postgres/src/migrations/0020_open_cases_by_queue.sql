-- redrive PostgreSQL schema, version 20 (as SQLite version 20): the open cases of each
-- queue by state and review deadline. The overview (`GET /v1/overview`) counts every
-- queue's open, overdue and escalated cases from this index alone, not by reading a
-- million case rows. (Version 19 is another change's.)

CREATE INDEX IF NOT EXISTS cases_open_by_queue ON cases (queue, state, review_deadline)
    WHERE closed_at IS NULL;
