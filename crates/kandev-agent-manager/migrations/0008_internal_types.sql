-- Types for tests and demos, hidden from the agent picker by default.
ALTER TABLE agent_types ADD COLUMN internal boolean NOT NULL DEFAULT false;
UPDATE agent_types SET internal = true WHERE id IN ('mock-agent', 'seed-agent');
