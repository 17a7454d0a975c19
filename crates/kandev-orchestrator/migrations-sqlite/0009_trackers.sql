-- Boards linked to an issue tracker and the task each issue became (see
-- the Postgres migration 0015_trackers.sql).
CREATE TABLE tracker_links (
    board_id       BLOB PRIMARY KEY,
    kind           TEXT NOT NULL,
    repository_url TEXT NOT NULL,
    repository     TEXT NOT NULL,
    label          TEXT NOT NULL,
    agent_type     TEXT NOT NULL,
    webhook_secret TEXT NOT NULL,
    created_by     TEXT NOT NULL,
    last_error     TEXT NOT NULL DEFAULT '',
    last_synced_at TEXT,
    created_at     TEXT NOT NULL
);
CREATE INDEX tracker_links_repository ON tracker_links (kind, repository);

CREATE TABLE tracker_issues (
    board_id   BLOB NOT NULL,
    number     INTEGER NOT NULL,
    task_id    BLOB,
    url        TEXT NOT NULL,
    claimed_at TEXT NOT NULL,
    PRIMARY KEY (board_id, number)
);
CREATE UNIQUE INDEX tracker_issues_task ON tracker_issues (task_id);
