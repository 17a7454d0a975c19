-- Whose stored secrets and agent home volume a run uses (a username): the
-- user who started it, the creator of a task auto-started at creation, the
-- board's owner for an automation without a person. '' for rows from
-- before the column: their launch takes the board's owner.
ALTER TABLE executions ADD COLUMN run_as text NOT NULL DEFAULT '';
