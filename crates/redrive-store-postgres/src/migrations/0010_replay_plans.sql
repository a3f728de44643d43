-- redrive PostgreSQL schema, version 10 (as SQLite version 10): bounded replay plans and
-- their items (redrive_store::replay_plan; the rules are
-- redrive_store::skeleton::replay_plans').

CREATE TABLE replay_plans (
    id          text   NOT NULL PRIMARY KEY,           -- plan_…
    queue       text   NOT NULL,
    destination text   NOT NULL,
    owner_id    text   NOT NULL,                       -- the token that created it
    owner_name  text   NOT NULL,
    spec        text   NOT NULL,                       -- JSON object, the broker's
    items       bigint NOT NULL,                       -- how many items it holds
    created_at  bigint NOT NULL,                       -- milliseconds since the epoch
    version     bigint NOT NULL,
    status      text   NOT NULL,                       -- PlanStatus::as_str
    owner_until bigint NOT NULL,                       -- the owner's lease on the plan
    stop_reason text,
    next_at     bigint,
    state       text   NOT NULL,                       -- JSON object, the broker's
    updated_at  bigint NOT NULL
);
CREATE INDEX replay_plans_status ON replay_plans (status, id);
CREATE INDEX replay_plans_queue ON replay_plans (queue, id);

-- The items of a plan, in admission order (seq from 0).
CREATE TABLE replay_plan_items (
    plan_id      text   NOT NULL,
    seq          bigint NOT NULL,
    case_id      text   NOT NULL,
    bytes        bigint NOT NULL,
    state        text   NOT NULL,                      -- PlanItemState::as_str
    admit_window bigint,                               -- the admission window, from 1
    message_id   text,
    detail       text,
    updated_at   bigint NOT NULL,
    PRIMARY KEY (plan_id, seq)
);
CREATE INDEX replay_plan_items_state ON replay_plan_items (plan_id, state, seq);
-- The item lease: at most one admitted item per case, whichever plan holds it.
CREATE UNIQUE INDEX replay_plan_items_admitted ON replay_plan_items (case_id)
    WHERE state = 'admitted';
