-- Real agents keep their own session store in their home (~/.claude,
-- ~/.codex, ~/.gemini): kept in a volume per user and task type, a
-- follow-up in a new container resumes the session with `session/load`.
-- Only where an operator left the seeded value.
UPDATE agent_types SET home_volume = '/home/agent', updated_at = now()
 WHERE id IN ('claude-code', 'codex', 'gemini') AND home_volume = '';

-- The conversation of each task as the agent manager sent and saw it: the
-- prompts and the agent's last message of each run, bounded. When an
-- agent no longer has a session to load, the follow-up starts a new one
-- with this conversation summarised before the prompt.
CREATE TABLE agent_exchanges (
    id           bigserial PRIMARY KEY,
    task_id      uuid NOT NULL,
    instance_id  uuid NOT NULL REFERENCES agent_instances (id) ON DELETE CASCADE,
    prompt       text NOT NULL,
    reply        text NOT NULL DEFAULT '',
    at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX agent_exchanges_task_idx ON agent_exchanges (task_id, id);
