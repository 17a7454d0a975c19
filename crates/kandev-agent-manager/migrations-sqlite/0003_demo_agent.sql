-- Postgres migration 0012 on SQLite: the mock agent is the demo, listed in
-- the agent picker; the seed's example agent stays internal.
UPDATE agent_types
   SET internal = 0, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
 WHERE id = 'mock-agent';
UPDATE agent_types
   SET name = 'Mock agent (demo)',
       description = 'A scripted demo agent: runs with no key and no network',
       updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
 WHERE id = 'mock-agent' AND name = 'Mock agent';
