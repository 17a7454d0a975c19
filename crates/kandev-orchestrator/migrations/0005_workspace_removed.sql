-- Whether the run's clone was removed (retention, delivery): the sweep
-- looks at each finished run once.
ALTER TABLE executions ADD COLUMN workspace_removed boolean NOT NULL DEFAULT false;
