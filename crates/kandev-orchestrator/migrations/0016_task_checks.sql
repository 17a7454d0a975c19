-- The CI checks of each task's last pushed commit (issue 42): after an
-- approval pushes the task's branch to a forge, the orchestrator polls the
-- commit's check runs and statuses (with backoff, until they are all
-- complete or a bound) and keeps their summary here. `checks` is the JSON
-- list of checks (name, kind, status, conclusion, url, failed, log_tail),
-- the forge's untrusted text, size-bounded. `next_poll_at` NULL: no longer
-- polled. `fix_sent_at`: when a "Fix CI" follow-up went for this commit.
CREATE TABLE task_checks (
    task_id        uuid PRIMARY KEY,
    repository_url text NOT NULL,
    sha            text NOT NULL,
    state          text NOT NULL CHECK (state IN ('none', 'pending', 'success', 'failure')),
    checks         text NOT NULL,
    error          text NOT NULL,
    polls          integer NOT NULL,
    next_poll_at   timestamptz,
    fix_sent_at    timestamptz,
    updated_at     timestamptz NOT NULL
);
CREATE INDEX task_checks_due ON task_checks (next_poll_at) WHERE next_poll_at IS NOT NULL;
