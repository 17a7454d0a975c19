-- Clones of directly launched runs (see the Postgres migration
-- 0010_direct_clones.sql).
CREATE TABLE direct_clones (
    task_id     BLOB PRIMARY KEY,
    finished_at TEXT NOT NULL
);
CREATE INDEX direct_clones_finished_at ON direct_clones (finished_at);
