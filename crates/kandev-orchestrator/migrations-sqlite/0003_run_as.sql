-- Whose stored secrets and agent home volume a run uses (see the Postgres
-- migration 0009_run_as.sql).
ALTER TABLE executions ADD COLUMN run_as TEXT NOT NULL DEFAULT '';
