-- Workflow columns (issues 41, 42): the agent profile a column's run uses
-- (an id of the agent manager's `agent_profiles`; NULL: the task's own).
ALTER TABLE board_columns ADD COLUMN profile_id uuid;
