-- redrive SQLite schema, version 8: recovery cases, intents and effect authorities.

-- Whether the configured dead-letter destination took a record (RouteTarget::as_str:
-- written, fell_back, unknown) and the dead-letter queue that could not.
ALTER TABLE dead_letters ADD COLUMN route_target TEXT NOT NULL DEFAULT 'written';
ALTER TABLE dead_letters ADD COLUMN missing_target TEXT;

-- One case per dead-letter record that automatic replay did not settle
-- (redrive_store::skeleton::cases). The identity is copied from the record when the case
-- opens, so that it outlives the record; the rest is the broker's.
CREATE TABLE cases (
    id                 TEXT    NOT NULL PRIMARY KEY,   -- 'case_' || record id without 'dl_'
    record_id          TEXT    NOT NULL UNIQUE,
    queue              TEXT    NOT NULL,
    message_id         TEXT    NOT NULL,
    intent_id          TEXT    NOT NULL,
    message_type       TEXT,
    session_id         TEXT,
    reason             TEXT    NOT NULL,
    description        TEXT,
    delivery_count     INTEGER NOT NULL,
    policy_version     INTEGER NOT NULL,
    body_sha256        TEXT    NOT NULL,
    body_size          INTEGER NOT NULL,
    valid_until        INTEGER,
    dead_lettered_at   INTEGER NOT NULL,
    opened_at          INTEGER NOT NULL,
    version            INTEGER NOT NULL,
    state              TEXT    NOT NULL,               -- CaseState::as_str
    route              TEXT    NOT NULL,               -- case::Route::as_str
    evidence_quality   TEXT    NOT NULL,               -- EvidenceQuality::as_str
    owner              TEXT,
    lease_until        INTEGER,
    review_deadline    INTEGER NOT NULL,
    next_check_at      INTEGER,
    closed_at          INTEGER,
    payload_until      INTEGER,
    payload_deleted_at INTEGER,
    source             TEXT,
    subject            TEXT,
    data               TEXT    NOT NULL                -- JSON object, the broker's
);
CREATE INDEX cases_queue ON cases (queue, id);
CREATE INDEX cases_state ON cases (state, id);
CREATE INDEX cases_intent ON cases (intent_id, id);
CREATE INDEX cases_reason ON cases (reason, id);
CREATE INDEX cases_type ON cases (message_type, id);
CREATE INDEX cases_owner ON cases (owner, id) WHERE owner IS NOT NULL;
CREATE INDEX cases_open_review ON cases (review_deadline, id) WHERE closed_at IS NULL;
CREATE INDEX cases_due ON cases (next_check_at, id) WHERE next_check_at IS NOT NULL;
CREATE INDEX cases_payload_due ON cases (payload_until, id)
    WHERE payload_until IS NOT NULL AND payload_deleted_at IS NULL;
CREATE INDEX cases_age ON cases (dead_lettered_at, id);

-- The append-only timeline of each case: seq counts from 1.
CREATE TABLE case_timeline (
    case_id  TEXT    NOT NULL,
    seq      INTEGER NOT NULL,
    at       INTEGER NOT NULL,
    actor    TEXT    NOT NULL,
    state    TEXT    NOT NULL,                         -- CaseState::as_str
    evidence TEXT    NOT NULL,
    fields   TEXT    NOT NULL,                         -- JSON object of strings
    PRIMARY KEY (case_id, seq)
) WITHOUT ROWID;

-- Payload bytes kept with a case under their digest (a transformation's output).
CREATE TABLE case_payloads (
    case_id    TEXT    NOT NULL,
    digest     TEXT    NOT NULL,
    body       BLOB    NOT NULL,
    PRIMARY KEY (case_id, digest)
);

-- What producers said about intents: the first word stands.
CREATE TABLE intents (
    intent_id     TEXT    NOT NULL PRIMARY KEY,
    status        TEXT    NOT NULL,                    -- IntentStatus::as_str
    superseded_by TEXT,
    reason        TEXT,
    actor         TEXT    NOT NULL,
    at            INTEGER NOT NULL
);

-- Effect authorities by message type.
CREATE TABLE effect_authorities (
    message_type TEXT    NOT NULL PRIMARY KEY,
    url          TEXT    NOT NULL,
    timeout_ms   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);

-- Records kept before cases existed that stand for one open theirs now, as of their
-- dead-letter time (the rule of skeleton::cases::OPEN_CASE).
INSERT INTO cases (id, record_id, queue, message_id, intent_id, message_type, session_id,
    reason, description, delivery_count, policy_version, body_sha256, body_size, valid_until,
    dead_lettered_at, opened_at, version, state, route, evidence_quality, review_deadline,
    next_check_at, data)
SELECT 'case_' || substr(id, 4), id, queue, message_id, COALESCE(NULLIF(intent, ''), message_id),
    message_type, session_id, reason, description, delivery_count, policy_version, body_sha256,
    length(body), valid_until, dead_lettered_at, dead_lettered_at, 1, 'route_observed',
    CASE route WHEN 'broker' THEN 'broker_routed' ELSE 'application_quarantined' END,
    count_quality, dead_lettered_at + 86400000, dead_lettered_at, '{}'
FROM dead_letters WHERE area = 'quarantine' OR (area = 'live' AND replay_due_at IS NULL)
    OR (area = 'archived' AND forwarded_queue IS NOT NULL AND judgement IS NULL);
INSERT INTO case_timeline (case_id, seq, at, actor, state, evidence, fields)
SELECT id, 1, opened_at, 'broker', 'route_observed',
    'dead-lettered (' || route || '): ' || reason, '{}'
FROM cases;
