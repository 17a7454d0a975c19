-- Where the event stream of the current container stands in its Docker
-- log (RFC 3339 timestamps with nanoseconds, as Docker writes them), stored
-- together with last_seq, so a restarted manager re-reads the output that
-- follows and numbers it from last_seq + 1.
ALTER TABLE agent_instances
    ADD COLUMN stdout_cursor text NOT NULL DEFAULT '',
    ADD COLUMN stderr_cursor text NOT NULL DEFAULT '';
