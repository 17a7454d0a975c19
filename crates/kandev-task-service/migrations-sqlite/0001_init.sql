-- The task service's tables on SQLite (one machine, one file): the same
-- tables as the Postgres migrations (`migrations/`), in SQLite's types.
-- Ids are 16-byte blobs, timestamps RFC 3339 text with six fractional
-- digits (so text order is time order), JSON text.

CREATE TABLE boards (
    id          BLOB PRIMARY KEY,
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    owner       TEXT NOT NULL DEFAULT '',
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE INDEX boards_owner_idx ON boards (owner, created_at);

CREATE TABLE tasks (
    id             BLOB PRIMARY KEY,
    board_id       BLOB NOT NULL REFERENCES boards (id) ON DELETE CASCADE,
    title          TEXT NOT NULL CHECK (length(title) BETWEEN 1 AND 500),
    description    TEXT NOT NULL DEFAULT '',
    state          TEXT NOT NULL CHECK (state IN ('TODO', 'IN_PROGRESS', 'REVIEW', 'BLOCKED',
                                                  'WAITING_FOR_INPUT', 'COMPLETED', 'FAILED', 'CANCELLED')),
    priority       INTEGER NOT NULL DEFAULT 0 CHECK (priority >= 0),
    agent_type     TEXT,
    repository_url TEXT NOT NULL DEFAULT '',
    branch         TEXT NOT NULL DEFAULT '',
    workspace_path TEXT NOT NULL DEFAULT '',
    metadata       TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata) AND json_type(metadata) = 'object'),
    max_retries    INTEGER NOT NULL DEFAULT 3 CHECK (max_retries >= 0),
    autostart      INTEGER NOT NULL DEFAULT 1,
    created_by     TEXT NOT NULL DEFAULT '',
    position       INTEGER NOT NULL DEFAULT 0,
    version        INTEGER NOT NULL DEFAULT 1,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL
);
CREATE INDEX tasks_board_state_idx ON tasks (board_id, state, position);

-- Audit log: one row per committed change. Kept when the task is deleted.
CREATE TABLE task_events (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         BLOB NOT NULL UNIQUE,
    task_id    BLOB NOT NULL,
    board_id   BLOB NOT NULL,
    kind       TEXT NOT NULL CHECK (kind IN ('created', 'updated', 'state_changed', 'deleted')),
    actor      TEXT NOT NULL DEFAULT '',
    old_value  TEXT,
    new_value  TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX task_events_task_idx ON task_events (task_id, seq);

-- Transactional outbox: written in the same transaction as the change, and
-- drained to the event bus in id order by the relay.
CREATE TABLE outbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id    BLOB NOT NULL UNIQUE,
    subject     TEXT NOT NULL,
    payload     TEXT NOT NULL,
    traceparent TEXT NOT NULL DEFAULT '',
    created_at  TEXT NOT NULL
);
