-- A tracker link may name one of its creator's secrets (kept sealed by the
-- agent manager) whose value is the forge token it uses instead of
-- KANDEV_FORGES's (issue 42). The name only: the value is never stored here.
ALTER TABLE tracker_links ADD COLUMN token_secret text NOT NULL DEFAULT '';
