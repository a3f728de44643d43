-- redrive PostgreSQL schema, version 21 (as SQLite version 21): every version of a
-- queue's policy. Creating a queue writes version 1 and every policy change the new
-- version, in the transaction that changes the queue; deleting the queue deletes them
-- (`GET /v1/queues/{name}/policy/versions`). Who changed a policy is in the audit log,
-- not here. A queue that exists now gets its current policy as its one version.

CREATE TABLE IF NOT EXISTS queue_policy_versions (
    queue_id   bigint NOT NULL,  -- queues.id (never reused)
    version    bigint NOT NULL,  -- queues.policy_version when it was written
    policy     text   NOT NULL,  -- QueuePolicy as JSON
    changed_at bigint NOT NULL,
    PRIMARY KEY (queue_id, version)
);

INSERT INTO queue_policy_versions (queue_id, version, policy, changed_at)
    SELECT id, policy_version, policy, updated_at FROM queues
    ON CONFLICT (queue_id, version) DO NOTHING;
