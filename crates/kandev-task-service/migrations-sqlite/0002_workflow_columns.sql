-- Workflow columns (issue 41): the same as the Postgres migration
-- `migrations/0004_workflow_columns.sql`, in SQLite's types.
CREATE TABLE board_columns (
    id              BLOB PRIMARY KEY,
    board_id        BLOB NOT NULL REFERENCES boards (id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    position        INTEGER NOT NULL,
    colour          TEXT NOT NULL DEFAULT '',
    state           TEXT NOT NULL CHECK (state IN ('TODO', 'IN_PROGRESS', 'REVIEW', 'BLOCKED',
                                                   'WAITING_FOR_INPUT', 'COMPLETED', 'FAILED', 'CANCELLED')),
    wip_limit       INTEGER CHECK (wip_limit IS NULL OR wip_limit >= 0),
    agent_type      TEXT,
    prompt_template TEXT NOT NULL DEFAULT '',
    on_success      BLOB,
    on_failure      BLOB
);
CREATE INDEX board_columns_board_idx ON board_columns (board_id, position);

ALTER TABLE tasks ADD COLUMN column_id BLOB REFERENCES board_columns (id) ON DELETE SET NULL;
ALTER TABLE tasks ADD COLUMN queued INTEGER NOT NULL DEFAULT 0;
CREATE INDEX tasks_column_idx ON tasks (column_id, queued, position);

WITH d (name, position, state) AS (VALUES
    ('To do', 0, 'TODO'), ('In progress', 1, 'IN_PROGRESS'), ('Review', 2, 'REVIEW'),
    ('Blocked', 3, 'BLOCKED'), ('Waiting for input', 4, 'WAITING_FOR_INPUT'),
    ('Completed', 5, 'COMPLETED'), ('Failed', 6, 'FAILED'), ('Cancelled', 7, 'CANCELLED'))
INSERT INTO board_columns (id, board_id, name, position, state)
SELECT randomblob(16), b.id, d.name, d.position, d.state FROM boards b CROSS JOIN d;

UPDATE tasks SET column_id = (SELECT c.id FROM board_columns c
                              WHERE c.board_id = tasks.board_id AND c.state = tasks.state);
