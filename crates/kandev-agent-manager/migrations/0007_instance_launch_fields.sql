-- The launch request's priority and metadata, kept on the instance and
-- returned with it (the seed's launch body carries both), and whose agent
-- home volume the instance uses (see agent_types.home_volume).
ALTER TABLE agent_instances
    ADD COLUMN priority   integer NOT NULL DEFAULT 0,
    ADD COLUMN metadata   jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(metadata) = 'object'),
    ADD COLUMN home_scope text NOT NULL DEFAULT '';

-- A directory of the agent's home kept across containers in a named Docker
-- volume, one per agent type and user (empty: none). The seed mounts
-- Auggie's ~/.augment/sessions so a new container can resume a session.
ALTER TABLE agent_types
    ADD COLUMN home_volume text NOT NULL DEFAULT '';
UPDATE agent_types SET home_volume = '/home/agent/.augment/sessions', updated_at = now()
 WHERE id IN ('augment-agent', 'auggie-cli') AND home_volume = '';

-- The seed's own example agent (AGENTS.md's agent.sh), built locally by
-- dockerfiles/seed-agent/build.sh.
INSERT INTO agent_types (id, name, description, image, command, memory_mb, cpu_cores, pids_limit,
                         timeout_seconds, capabilities, required_env, optional_env,
                         mount_ssh, mount_gitconfig, mount_git_credentials, network_mode,
                         permission_policy)
VALUES ('seed-agent', 'Seed example agent',
        'The example agent.sh of the seed''s AGENTS.md, for demos and tests',
        'kandev/seed-agent:latest', '{/usr/local/bin/agent,--acp}', 128, 0.5, 64, 600,
        '{acp}', '{}', '{}', false, false, false, 'none', 'auto_approve')
ON CONFLICT (id) DO NOTHING;
