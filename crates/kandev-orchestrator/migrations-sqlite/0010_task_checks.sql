-- The CI checks of each task's last pushed commit (see the Postgres
-- migration 0016_task_checks.sql).
CREATE TABLE task_checks (
    task_id        BLOB PRIMARY KEY,
    repository_url TEXT NOT NULL,
    sha            TEXT NOT NULL,
    state          TEXT NOT NULL CHECK (state IN ('none', 'pending', 'success', 'failure')),
    checks         TEXT NOT NULL,
    error          TEXT NOT NULL,
    polls          INTEGER NOT NULL,
    next_poll_at   TEXT,
    fix_sent_at    TEXT,
    updated_at     TEXT NOT NULL
);
CREATE INDEX task_checks_due ON task_checks (next_poll_at) WHERE next_poll_at IS NOT NULL;
