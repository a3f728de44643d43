-- redrive SQLite schema, version 11: SQS message move tasks are replay plans of kind
-- 'sqs_move' (redrive_store::skeleton::move_tasks holds the mapping). The rows of
-- move_tasks are copied into replay_plans, and move_tasks is dropped.

ALTER TABLE replay_plans ADD COLUMN kind TEXT NOT NULL DEFAULT 'cases';  -- PlanKind::as_str
ALTER TABLE replay_plans ADD COLUMN runner TEXT;                         -- the node running a move plan
ALTER TABLE replay_plans ADD COLUMN runner_until INTEGER;                -- its heartbeat lease
ALTER TABLE replay_plans ADD COLUMN seq INTEGER;                         -- creation order of move plans

INSERT INTO replay_plans (id, queue, destination, owner_id, owner_name, spec, items,
    created_at, version, status, owner_until, stop_reason, next_at, state, updated_at,
    kind, runner, runner_until, seq)
SELECT handle, source, coalesce(destination, ''), owner_id, owner_name,
    json_object('max_per_second', max_per_second), 0, started_at, 1,
    CASE status
        WHEN 'RUNNING' THEN 'running'
        WHEN 'CANCELLING' THEN 'cancelling'
        WHEN 'COMPLETED' THEN 'completed'
        WHEN 'CANCELLED' THEN 'cancelled'
        ELSE 'stopped'
    END,
    9223372036854775807,                                 -- no owner's lease
    CASE WHEN status = 'FAILED' THEN failure_reason END,
    NULL,
    json_object('moved', moved, 'to_move', to_move, 'next_item_ms', NULL,
        'failure_reason', failure_reason),
    updated_at, 'sqs_move', runner, runner_until, seq
FROM move_tasks ORDER BY seq;

DROP TABLE move_tasks;

-- One active move plan per source queue (cases plans are not concerned).
CREATE UNIQUE INDEX replay_plans_active_move ON replay_plans (queue)
    WHERE kind = 'sqs_move' AND status IN ('running', 'cancelling');
CREATE INDEX replay_plans_moves ON replay_plans (kind, queue, created_at, seq);
CREATE INDEX replay_plans_seq ON replay_plans (seq);
