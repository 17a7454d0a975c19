-- Tasks whose runs were launched directly (through the gateway, with no
-- execution here) and whose last run ended at `finished_at`: the retention
-- sweep removes their clones like those of executions.
CREATE TABLE direct_clones (
    task_id     uuid PRIMARY KEY,
    finished_at timestamptz NOT NULL
);
CREATE INDEX direct_clones_finished_at ON direct_clones (finished_at);
