-- Subtasks and "blocked by" links (issue 41). A subtask names its parent
-- (one level: a parent has no parent), on the same board; when the parent
-- goes, its subtasks stay as tasks of their own. A link says `task_id`
-- waits for `blocker_id` (same board) to complete; it goes with either.
-- `blocked` is whether any blocker of the task is not COMPLETED, kept by
-- the store in the change that makes it so: a blocked task is not started
-- by itself. Existing tasks have no parent and no blocker: nothing moves.
ALTER TABLE tasks ADD COLUMN parent_id uuid REFERENCES tasks (id) ON DELETE SET NULL;
ALTER TABLE tasks ADD COLUMN blocked boolean NOT NULL DEFAULT false;
CREATE INDEX tasks_parent_idx ON tasks (parent_id);

CREATE TABLE task_blockers (
    task_id    uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    blocker_id uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    PRIMARY KEY (task_id, blocker_id),
    CHECK (task_id <> blocker_id)
);
CREATE INDEX task_blockers_blocker_idx ON task_blockers (blocker_id);
