-- redrive PostgreSQL schema, version 13 (as SQLite version 13): a producer's word on an
-- intent holds for the entities it was accepted for (a grant scope: '*', a queue name, or
-- a prefix ending in '*'), one word per intent and entity. Words stored before held for
-- every entity and keep doing so ('*'). Written to run again over a schema that has it.

ALTER TABLE intents ADD COLUMN IF NOT EXISTS entity text NOT NULL DEFAULT '*';
ALTER TABLE intents ALTER COLUMN entity DROP DEFAULT;
ALTER TABLE intents DROP CONSTRAINT IF EXISTS intents_pkey;
ALTER TABLE intents ADD PRIMARY KEY (intent_id, entity);
