-- The orchestrator owns the `orchestrator` schema (search_path points at it).

-- Every ACP message of every run of a task, numbered per task.
CREATE TABLE feed (
    task_id      uuid NOT NULL,
    seq          bigint NOT NULL CHECK (seq >= 1),
    instance_id  uuid NOT NULL,
    instance_seq bigint NOT NULL,
    event        jsonb NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, seq),
    UNIQUE (instance_id, instance_seq)
);

-- One row per task the orchestrator has seen: its execution state, and its
-- place in the launch queue while state = 'queued'.
CREATE SEQUENCE queue_order;
CREATE TABLE executions (
    task_id        uuid PRIMARY KEY,
    state          text NOT NULL CHECK (state IN ('idle', 'queued', 'launching', 'running',
                                                  'retry_wait', 'completed', 'failed', 'stopped')),
    agent_type     text NOT NULL DEFAULT '',
    priority       integer NOT NULL DEFAULT 0,
    queue_order    bigint,
    instance_id    uuid,
    attempts       integer NOT NULL DEFAULT 0,
    max_retries    integer NOT NULL DEFAULT 0,
    last_error     text NOT NULL DEFAULT '',
    acp_session_id text NOT NULL DEFAULT '',
    -- A prompt to launch the next run with instead of title + description.
    prompt         text NOT NULL DEFAULT '',
    retry_at       timestamptz,
    updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX executions_queue_idx ON executions (priority DESC, queue_order) WHERE state = 'queued';

-- Envelope ids of task.* and agent.* events already handled.
CREATE TABLE processed_events (
    id           uuid PRIMARY KEY,
    processed_at timestamptz NOT NULL DEFAULT now()
);
