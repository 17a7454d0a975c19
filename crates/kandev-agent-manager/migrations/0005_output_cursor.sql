-- Where the event stream of the current container stands in the agent's
-- output, as complete lines of each stream: every non-blank stdout line and
-- every stderr line is one event, so a restarted manager re-reads the
-- Docker log, skips this many lines and numbers the rest from last_seq + 1.
-- Replaces the Docker log timestamps: live output now comes from the
-- attach stream, which has none.
ALTER TABLE agent_instances
    ADD COLUMN stdout_lines bigint NOT NULL DEFAULT 0,
    ADD COLUMN stderr_lines bigint NOT NULL DEFAULT 0,
    DROP COLUMN stdout_cursor,
    DROP COLUMN stderr_cursor;
