-- Follow-ups sent while a task's run was busy with a turn (issue 40): held
-- here, in the order they came, until the turn ends and they go to the
-- agent together as the next prompt; each may be edited or cancelled until
-- then. `author` is the run's user who sent it: they go only to a run of
-- theirs (a run carries its user's secrets).
CREATE TABLE pending_prompts (
    id        uuid PRIMARY KEY,
    task_id   uuid NOT NULL,
    text      text NOT NULL,
    author    text NOT NULL,
    queued_at timestamptz NOT NULL
);
CREATE INDEX pending_prompts_task ON pending_prompts (task_id, id);
