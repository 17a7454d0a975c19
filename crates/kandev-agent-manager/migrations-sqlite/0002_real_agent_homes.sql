-- Postgres migration 0011 on SQLite: real agents keep their home (and so
-- their session store) in a volume by default, and each task's
-- conversation is kept, bounded, for a follow-up whose session is gone.
UPDATE agent_types
   SET home_volume = '/home/agent', updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
 WHERE id IN ('claude-code', 'codex', 'gemini') AND home_volume = '';

CREATE TABLE agent_exchanges (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id      BLOB NOT NULL,
    instance_id  BLOB NOT NULL REFERENCES agent_instances (id) ON DELETE CASCADE,
    prompt       TEXT NOT NULL,
    reply        TEXT NOT NULL DEFAULT '',
    at           TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX agent_exchanges_task_idx ON agent_exchanges (task_id, id);
