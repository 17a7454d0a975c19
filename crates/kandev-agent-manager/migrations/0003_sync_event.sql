-- The last event that no log line can reproduce (a message sent to the
-- agent, a lifecycle event), stored before it is published, so a manager
-- restarted in between publishes it again (same id: the copy is dropped).
ALTER TABLE agent_instances ADD COLUMN sync_event jsonb;
