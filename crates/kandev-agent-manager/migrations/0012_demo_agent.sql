-- The mock agent is the demo a new user runs first (no key, no network):
-- listed in the agent picker, named as the demo.
-- The seed's example agent stays internal. A name or description an
-- operator changed is kept.
UPDATE agent_types SET internal = false, updated_at = now() WHERE id = 'mock-agent';
UPDATE agent_types
   SET name = 'Mock agent (demo)',
       description = 'A scripted demo agent: runs with no key and no network',
       updated_at = now()
 WHERE id = 'mock-agent' AND name = 'Mock agent';
