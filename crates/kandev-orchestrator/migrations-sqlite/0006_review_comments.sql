-- The comments of each "Request changes" (see the Postgres migration
-- 0012_review_comments.sql).
CREATE TABLE review_comments (
    id          BLOB PRIMARY KEY,
    task_id     BLOB NOT NULL,
    round       INTEGER NOT NULL CHECK (round >= 1),
    path        TEXT NOT NULL DEFAULT '',
    line        INTEGER CHECK (line >= 1),
    side        TEXT NOT NULL DEFAULT 'new' CHECK (side IN ('new', 'old')),
    line_text   TEXT NOT NULL DEFAULT '',
    body        TEXT NOT NULL,
    author      TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    resolved_by TEXT,
    resolved_at TEXT
);
CREATE INDEX review_comments_task ON review_comments (task_id, round);
