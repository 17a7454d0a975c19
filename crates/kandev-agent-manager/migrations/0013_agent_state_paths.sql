-- What an agent writes into the workspace for itself (a session store, its
-- local settings): .gitignore patterns, relative to the repository's root,
-- that Changes and delivery leave out as they leave out what the
-- repository ignores.
ALTER TABLE agent_types
    ADD COLUMN state_paths text[] NOT NULL DEFAULT '{}';

-- Claude Code writes the rules a user allows always into the repository's
-- .claude/settings.local.json.
UPDATE agent_types SET state_paths = '{.claude/settings.local.json}', updated_at = now()
 WHERE id = 'claude-code';

-- The mock agent keeps its sessions in its home, as real agents do: the
-- home is kept in a volume (per user), so a follow-up in a new container
-- loads its session. A state directory set relative to the workspace
-- (KANDEV_MOCK_STATE_DIR=.kandev-mock) is the agent's own, not the work.
-- A home an operator set is kept.
UPDATE agent_types SET home_volume = '/home/agent', updated_at = now()
 WHERE id = 'mock-agent' AND home_volume = '';
UPDATE agent_types SET state_paths = '{.kandev-mock/}', updated_at = now()
 WHERE id = 'mock-agent';
