-- Postgres migration 0013 on SQLite: what an agent writes into the
-- workspace for itself (.gitignore patterns, a JSON array) is left out of
-- Changes and delivery; Claude Code's local settings, the mock agent's
-- state directory; the mock agent keeps its home (its sessions) in a
-- volume, as real agents do.
ALTER TABLE agent_types
    ADD COLUMN state_paths TEXT NOT NULL DEFAULT '[]' CHECK (json_type(state_paths) = 'array');

UPDATE agent_types
   SET state_paths = '[".claude/settings.local.json"]',
       updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
 WHERE id = 'claude-code';

UPDATE agent_types
   SET home_volume = '/home/agent', updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
 WHERE id = 'mock-agent' AND home_volume = '';
UPDATE agent_types
   SET state_paths = '[".kandev-mock/"]', updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
 WHERE id = 'mock-agent';
