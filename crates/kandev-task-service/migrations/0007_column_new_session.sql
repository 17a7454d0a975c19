-- Workflow columns (issue 41): a column's run continues the task's agent
-- session (the default, as before) or starts a new one.
ALTER TABLE board_columns ADD COLUMN new_session boolean NOT NULL DEFAULT false;
