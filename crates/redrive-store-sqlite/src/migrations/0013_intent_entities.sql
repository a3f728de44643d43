-- redrive SQLite schema, version 13: a producer's word on an intent holds for the
-- entities it was accepted for (a grant scope: '*', a queue name, or a prefix ending in
-- '*'), one word per intent and entity. Words stored before held for every entity and
-- keep doing so ('*').
CREATE TABLE intents_by_entity (
    intent_id     TEXT    NOT NULL,
    entity        TEXT    NOT NULL,
    status        TEXT    NOT NULL,                    -- IntentStatus::as_str
    superseded_by TEXT,
    reason        TEXT,
    actor         TEXT    NOT NULL,
    at            INTEGER NOT NULL,
    PRIMARY KEY (intent_id, entity)
);
INSERT INTO intents_by_entity (intent_id, entity, status, superseded_by, reason, actor, at)
    SELECT intent_id, '*', status, superseded_by, reason, actor, at FROM intents;
DROP TABLE intents;
ALTER TABLE intents_by_entity RENAME TO intents;
