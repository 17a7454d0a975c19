-- The seed's architecture names the Augment agent `auggie-cli`: the same
-- agent as `augment-agent` (the seed's AGENTS.md name), registered under
-- both names so a client written against either launches it.
INSERT INTO agent_types (id, name, description, image, command, working_dir, memory_mb,
                         cpu_cores, pids_limit, timeout_seconds, capabilities, required_env,
                         optional_env, mount_ssh, mount_gitconfig, mount_git_credentials,
                         network_mode, permission_policy, enabled)
SELECT 'auggie-cli', 'Auggie CLI', 'Augment Code CLI agent in ACP mode (the seed''s auggie-cli)',
       image, command, working_dir, memory_mb, cpu_cores, pids_limit, timeout_seconds,
       capabilities, required_env, optional_env, mount_ssh, mount_gitconfig,
       mount_git_credentials, network_mode, permission_policy, enabled
  FROM agent_types WHERE id = 'augment-agent'
ON CONFLICT (id) DO NOTHING;
