-- Several agent managers may share this schema (one per Docker host): each
-- instance belongs to the manager that launched it, and a manager lists,
-- controls and recovers only its own. Instances from before this column
-- ('') belong to whichever manager reads them (there was one).
ALTER TABLE agent_instances ADD COLUMN manager_id text NOT NULL DEFAULT '';
CREATE INDEX agent_instances_active_by_manager ON agent_instances (manager_id)
    WHERE status IN ('pending', 'starting', 'running');
