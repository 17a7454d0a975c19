-- The task service owns the `task_service` schema (search_path points at it).

CREATE TABLE boards (
    id          uuid PRIMARY KEY,
    name        text NOT NULL,
    description text NOT NULL DEFAULT '',
    owner       text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX boards_owner_idx ON boards (owner, created_at);

CREATE TABLE tasks (
    id             uuid PRIMARY KEY,
    board_id       uuid NOT NULL REFERENCES boards (id) ON DELETE CASCADE,
    title          text NOT NULL CHECK (length(title) BETWEEN 1 AND 500),
    description    text NOT NULL DEFAULT '',
    state          text NOT NULL CHECK (state IN ('TODO', 'IN_PROGRESS', 'REVIEW', 'BLOCKED',
                                                  'WAITING_FOR_INPUT', 'COMPLETED', 'FAILED', 'CANCELLED')),
    priority       integer NOT NULL DEFAULT 0 CHECK (priority >= 0),
    agent_type     text,
    repository_url text NOT NULL DEFAULT '',
    branch         text NOT NULL DEFAULT '',
    workspace_path text NOT NULL DEFAULT '',
    metadata       jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(metadata) = 'object'),
    max_retries    integer NOT NULL DEFAULT 3 CHECK (max_retries >= 0),
    created_by     text NOT NULL DEFAULT '',
    position       bigint NOT NULL DEFAULT 0,
    version        bigint NOT NULL DEFAULT 1,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tasks_board_state_idx ON tasks (board_id, state, position);

-- Audit log: one row per committed change. Kept when the task is deleted.
CREATE TABLE task_events (
    id         uuid PRIMARY KEY,
    seq        bigserial NOT NULL UNIQUE,
    task_id    uuid NOT NULL,
    board_id   uuid NOT NULL,
    kind       text NOT NULL CHECK (kind IN ('created', 'updated', 'state_changed', 'deleted')),
    actor      text NOT NULL DEFAULT '',
    old_value  jsonb,
    new_value  jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX task_events_task_idx ON task_events (task_id, seq);

-- Transactional outbox: written in the same transaction as the change, and
-- drained to NATS JetStream in id order by the relay.
CREATE TABLE outbox (
    id         bigserial PRIMARY KEY,
    event_id   uuid NOT NULL UNIQUE,
    subject    text NOT NULL,
    payload    jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
