-- redrive SQLite schema, version 10: bounded replay plans and their items
-- (redrive_store::replay_plan; the rules are redrive_store::skeleton::replay_plans').

CREATE TABLE replay_plans (
    id          TEXT    NOT NULL PRIMARY KEY,          -- plan_…
    queue       TEXT    NOT NULL,
    destination TEXT    NOT NULL,
    owner_id    TEXT    NOT NULL,                      -- the token that created it
    owner_name  TEXT    NOT NULL,
    spec        TEXT    NOT NULL,                      -- JSON object, the broker's
    items       INTEGER NOT NULL,                      -- how many items it holds
    created_at  INTEGER NOT NULL,                      -- milliseconds since the epoch
    version     INTEGER NOT NULL,
    status      TEXT    NOT NULL,                      -- PlanStatus::as_str
    owner_until INTEGER NOT NULL,                      -- the owner's lease on the plan
    stop_reason TEXT,
    next_at     INTEGER,
    state       TEXT    NOT NULL,                      -- JSON object, the broker's
    updated_at  INTEGER NOT NULL
);
CREATE INDEX replay_plans_status ON replay_plans (status, id);
CREATE INDEX replay_plans_queue ON replay_plans (queue, id);

-- The items of a plan, in admission order (seq from 0).
CREATE TABLE replay_plan_items (
    plan_id      TEXT    NOT NULL,
    seq          INTEGER NOT NULL,
    case_id      TEXT    NOT NULL,
    bytes        INTEGER NOT NULL,
    state        TEXT    NOT NULL,                     -- PlanItemState::as_str
    admit_window INTEGER,                              -- the admission window, from 1
    message_id   TEXT,
    detail       TEXT,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (plan_id, seq)
) WITHOUT ROWID;
CREATE INDEX replay_plan_items_state ON replay_plan_items (plan_id, state, seq);
-- The item lease: at most one admitted item per case, whichever plan holds it.
CREATE UNIQUE INDEX replay_plan_items_admitted ON replay_plan_items (case_id)
    WHERE state = 'admitted';
