-- Why a run was queued: 'eligible' (created in or moved to TODO with an
-- agent type) or 'manual' (StartTask, a follow-up prompt). An eligible run
-- is launched only if its task is still TODO when its turn comes, so events
-- replayed after downtime never launch a task that has moved on.
ALTER TABLE executions ADD COLUMN origin text NOT NULL DEFAULT 'eligible'
    CHECK (origin IN ('eligible', 'manual'));
