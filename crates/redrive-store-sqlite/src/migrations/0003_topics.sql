-- redrive SQLite schema, version 3: topics, their subscriptions (each owns a queue), and
-- the topic-level duplicate-detection register (source + id of published events).
CREATE TABLE topics (
    name         TEXT    NOT NULL PRIMARY KEY,
    policy       TEXT    NOT NULL,            -- TopicPolicy as JSON
    version      INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,            -- milliseconds since the epoch
    updated_at   INTEGER NOT NULL
);

CREATE TABLE subscriptions (
    topic        TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    queue        TEXT    NOT NULL UNIQUE,     -- the internal queue, <topic>.<name>
    spec         TEXT    NOT NULL,            -- SubscriptionSpec as JSON
    version      INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (topic, name)
);

CREATE TABLE topic_dedup (
    topic        TEXT    NOT NULL,
    dedup_key    TEXT    NOT NULL,            -- source, '\n', id
    expires_at   INTEGER NOT NULL,
    PRIMARY KEY (topic, dedup_key)
);
CREATE INDEX topic_dedup_expiry ON topic_dedup (topic, expires_at);
