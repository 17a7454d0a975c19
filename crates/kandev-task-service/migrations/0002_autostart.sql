-- Whether the orchestrator starts the task's agent by itself when the task
-- is in TODO with an agent type ("Create & start"); false waits for an
-- explicit start ("Create").
ALTER TABLE tasks ADD COLUMN autostart boolean NOT NULL DEFAULT true;
