-- The agent manager a run was placed on (its KANDEV_MANAGER_ID; '' before
-- the pool): when it goes away, its runs move to another.
ALTER TABLE executions ADD COLUMN manager_id text NOT NULL DEFAULT '';

-- Instances whose run moved to another manager: what they still send is
-- not the task's feed, and a manager that comes back stops them.
CREATE TABLE moved_instances (
    instance_id uuid PRIMARY KEY,
    task_id     uuid NOT NULL,
    manager_id  text NOT NULL,
    moved_at    timestamptz NOT NULL DEFAULT now()
);
