-- Boards linked to an issue tracker (issue 42): the linked repository's
-- issues (with the label) become the board's tasks, by webhook and by a
-- periodic reconcile. `webhook_secret` checks the deliveries' signatures;
-- it is never returned or logged. `last_error` is the last sync's failure
-- in plain words (a deleted or renamed repository), shown on the link.
CREATE TABLE tracker_links (
    board_id       uuid PRIMARY KEY,
    kind           text NOT NULL,
    repository_url text NOT NULL,
    repository     text NOT NULL,
    label          text NOT NULL,
    agent_type     text NOT NULL,
    webhook_secret text NOT NULL,
    created_by     text NOT NULL,
    last_error     text NOT NULL DEFAULT '',
    last_synced_at timestamptz,
    created_at     timestamptz NOT NULL
);
CREATE INDEX tracker_links_repository ON tracker_links (kind, repository);

-- The task each issue became: one per (board, issue), whichever of the
-- webhook and the reconcile comes first (a claim with no task yet while
-- the task is being made).
CREATE TABLE tracker_issues (
    board_id   uuid NOT NULL,
    number     bigint NOT NULL,
    task_id    uuid,
    url        text NOT NULL,
    claimed_at timestamptz NOT NULL,
    PRIMARY KEY (board_id, number)
);
CREATE UNIQUE INDEX tracker_issues_task ON tracker_issues (task_id);
