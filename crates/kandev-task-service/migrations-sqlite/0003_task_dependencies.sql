-- Subtasks and "blocked by" links (issue 41): the same as the Postgres
-- migration `migrations/0005_task_dependencies.sql`, in SQLite's types.
ALTER TABLE tasks ADD COLUMN parent_id BLOB REFERENCES tasks (id) ON DELETE SET NULL;
ALTER TABLE tasks ADD COLUMN blocked INTEGER NOT NULL DEFAULT 0;
CREATE INDEX tasks_parent_idx ON tasks (parent_id);

CREATE TABLE task_blockers (
    task_id    BLOB NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    blocker_id BLOB NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    PRIMARY KEY (task_id, blocker_id),
    CHECK (task_id <> blocker_id)
);
CREATE INDEX task_blockers_blocker_idx ON task_blockers (blocker_id);
