-- Workflow columns (issue 41): each board's own columns, in order, each
-- mapping to one task state (the seed's states stay the states of tasks),
-- with an optional WIP limit and optional automation: entering starts a
-- run of `agent_type` with `prompt_template`; a run that finishes moves
-- the card to `on_success`, one that fails to `on_failure`.
CREATE TABLE board_columns (
    id              uuid PRIMARY KEY,
    board_id        uuid NOT NULL REFERENCES boards (id) ON DELETE CASCADE,
    name            text NOT NULL,
    position        integer NOT NULL,
    colour          text NOT NULL DEFAULT '',
    state           text NOT NULL CHECK (state IN ('TODO', 'IN_PROGRESS', 'REVIEW', 'BLOCKED',
                                                   'WAITING_FOR_INPUT', 'COMPLETED', 'FAILED', 'CANCELLED')),
    wip_limit       integer CHECK (wip_limit IS NULL OR wip_limit >= 0),
    agent_type      text,
    prompt_template text NOT NULL DEFAULT '',
    on_success      uuid,
    on_failure      uuid
);
CREATE INDEX board_columns_board_idx ON board_columns (board_id, position);

-- The task's column (NULL: none of the board's columns maps its state),
-- and whether it waits in its column's queue (a full WIP limit).
ALTER TABLE tasks ADD COLUMN column_id uuid REFERENCES board_columns (id) ON DELETE SET NULL;
ALTER TABLE tasks ADD COLUMN queued boolean NOT NULL DEFAULT false;
CREATE INDEX tasks_column_idx ON tasks (column_id, queued, position);

-- Existing boards get the default workflow (one column per state, today's
-- board), and each task the column of its state: nothing moves.
WITH d (name, position, state) AS (VALUES
    ('To do', 0, 'TODO'), ('In progress', 1, 'IN_PROGRESS'), ('Review', 2, 'REVIEW'),
    ('Blocked', 3, 'BLOCKED'), ('Waiting for input', 4, 'WAITING_FOR_INPUT'),
    ('Completed', 5, 'COMPLETED'), ('Failed', 6, 'FAILED'), ('Cancelled', 7, 'CANCELLED'))
INSERT INTO board_columns (id, board_id, name, position, state)
SELECT gen_random_uuid(), b.id, d.name, d.position, d.state FROM boards b CROSS JOIN d;

UPDATE tasks SET column_id = (SELECT c.id FROM board_columns c
                              WHERE c.board_id = tasks.board_id AND c.state = tasks.state);
