-- Follow-ups held until the turn ends (see the Postgres migration
-- 0013_pending_prompts.sql).
CREATE TABLE pending_prompts (
    id        BLOB PRIMARY KEY,
    task_id   BLOB NOT NULL,
    text      TEXT NOT NULL,
    author    TEXT NOT NULL,
    queued_at TEXT NOT NULL
);
CREATE INDEX pending_prompts_task ON pending_prompts (task_id, id);
