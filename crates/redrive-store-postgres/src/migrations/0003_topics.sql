-- redrive PostgreSQL schema, version 3 (as SQLite version 3): topics, their subscriptions
-- (each owns a queue), and the topic-level duplicate-detection register.
CREATE TABLE topics (
    name       text   NOT NULL PRIMARY KEY,
    policy     text   NOT NULL,                  -- TopicPolicy as JSON
    version    bigint NOT NULL,
    created_at bigint NOT NULL,                  -- milliseconds since the epoch
    updated_at bigint NOT NULL
);

CREATE TABLE subscriptions (
    topic      text   NOT NULL,
    name       text   NOT NULL,
    queue      text   NOT NULL UNIQUE,           -- the internal queue, <topic>.<name>
    spec       text   NOT NULL,                  -- SubscriptionSpec as JSON
    version    bigint NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    PRIMARY KEY (topic, name)
);

CREATE TABLE topic_dedup (
    topic      text   NOT NULL,
    dedup_key  text   NOT NULL,                  -- source, '\n', id
    expires_at bigint NOT NULL,
    PRIMARY KEY (topic, dedup_key)
);
CREATE INDEX topic_dedup_expiry ON topic_dedup (topic, expires_at);
