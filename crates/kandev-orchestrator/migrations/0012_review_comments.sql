-- The comments of each "Request changes" (issue 40), kept so the diff shows
-- them on later rounds and each can be resolved. `round` counts the task's
-- requests for changes (1, 2, …); `line` is on `side` of the diff ('new':
-- the file after the change, 'old': before it), none for a comment on a
-- whole file (`path`) or on the whole change (no path); `line_text` is
-- the commented line as it read then (a later diff that differs there
-- shows the comment as outdated). Open while `resolved_at` is null.
CREATE TABLE review_comments (
    id          uuid PRIMARY KEY,
    task_id     uuid NOT NULL,
    round       integer NOT NULL CHECK (round >= 1),
    path        text NOT NULL DEFAULT '',
    line        integer CHECK (line >= 1),
    side        text NOT NULL DEFAULT 'new' CHECK (side IN ('new', 'old')),
    line_text   text NOT NULL DEFAULT '',
    body        text NOT NULL,
    author      text NOT NULL,
    created_at  timestamptz NOT NULL,
    resolved_by text,
    resolved_at timestamptz
);
CREATE INDEX review_comments_task ON review_comments (task_id, round);
