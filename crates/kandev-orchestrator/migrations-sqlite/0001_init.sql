-- The orchestrator's tables on SQLite (one machine, one file): the tables
-- the Postgres migrations (`migrations/`) arrive at, in SQLite's types. Ids
-- are 16-byte blobs, timestamps RFC 3339 text with six fractional digits.
-- Postgres's `queue_order` sequence is one more than the largest order in
-- `executions` (see `SqliteExecStore`).

CREATE TABLE executions (
    task_id           BLOB PRIMARY KEY,
    state             TEXT NOT NULL CHECK (state IN ('idle', 'queued', 'launching', 'running',
                                                     'retry_wait', 'completed', 'failed', 'stopped')),
    agent_type        TEXT NOT NULL DEFAULT '',
    priority          INTEGER NOT NULL DEFAULT 0,
    queue_order       INTEGER,
    instance_id       BLOB,
    attempts          INTEGER NOT NULL DEFAULT 0,
    max_retries       INTEGER NOT NULL DEFAULT 0,
    last_error        TEXT NOT NULL DEFAULT '',
    acp_session_id    TEXT NOT NULL DEFAULT '',
    prompt            TEXT NOT NULL DEFAULT '',
    retry_at          TEXT,
    updated_at        TEXT NOT NULL,
    origin            TEXT NOT NULL DEFAULT 'eligible' CHECK (origin IN ('eligible', 'manual')),
    traceparent       TEXT NOT NULL DEFAULT '',
    workspace_removed INTEGER NOT NULL DEFAULT 0,
    manager_id        TEXT NOT NULL DEFAULT ''
);
CREATE INDEX executions_queue_idx ON executions (priority DESC, queue_order) WHERE state = 'queued';

CREATE TABLE processed_events (
    id           BLOB PRIMARY KEY,
    processed_at TEXT NOT NULL
);

CREATE TABLE feed_chunks (
    task_id            BLOB NOT NULL,
    first_seq          INTEGER NOT NULL CHECK (first_seq >= 1),
    last_seq           INTEGER NOT NULL CHECK (last_seq >= first_seq),
    instance_id        BLOB NOT NULL,
    first_instance_seq INTEGER NOT NULL CHECK (first_instance_seq >= 1),
    -- A JSON array of the events, `first_seq..=last_seq` in order.
    events             TEXT NOT NULL,
    created_at         TEXT NOT NULL,
    PRIMARY KEY (task_id, first_seq)
);
CREATE INDEX feed_chunks_instance_idx ON feed_chunks (instance_id, first_instance_seq);

CREATE TABLE moved_instances (
    instance_id BLOB PRIMARY KEY,
    task_id     BLOB NOT NULL,
    manager_id  TEXT NOT NULL,
    moved_at    TEXT NOT NULL
);
