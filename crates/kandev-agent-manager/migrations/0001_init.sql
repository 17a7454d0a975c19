-- The agent manager owns the `agent_manager` schema (search_path points at it).

CREATE TABLE agent_types (
    id                 text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9._-]{0,63}$'),
    name               text NOT NULL,
    description        text NOT NULL DEFAULT '',
    image              text NOT NULL CHECK (length(image) > 0),
    command            text[] NOT NULL DEFAULT '{}',
    working_dir        text NOT NULL DEFAULT '/workspace',
    memory_mb          bigint NOT NULL DEFAULT 2048 CHECK (memory_mb > 0),
    cpu_cores          double precision NOT NULL DEFAULT 1.0 CHECK (cpu_cores > 0),
    pids_limit         bigint NOT NULL DEFAULT 512 CHECK (pids_limit > 0),
    timeout_seconds    bigint NOT NULL DEFAULT 3600 CHECK (timeout_seconds > 0),
    -- client capabilities offered to the agent: fs (fs/* on the host
    -- workspace), terminal (terminal/* as docker exec in the container)
    capabilities       text[] NOT NULL DEFAULT '{}',
    required_env       text[] NOT NULL DEFAULT '{}',
    optional_env       text[] NOT NULL DEFAULT '{}',
    mount_ssh          boolean NOT NULL DEFAULT false,
    mount_gitconfig    boolean NOT NULL DEFAULT false,
    mount_git_credentials boolean NOT NULL DEFAULT false,
    network_mode       text NOT NULL DEFAULT 'none',
    permission_policy  text NOT NULL DEFAULT 'auto_approve'
                       CHECK (permission_policy IN ('auto_approve', 'deny', 'ask')),
    enabled            boolean NOT NULL DEFAULT true,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);

INSERT INTO agent_types (id, name, description, image, command, memory_mb, cpu_cores, pids_limit,
                         timeout_seconds, capabilities, required_env, optional_env,
                         mount_ssh, mount_gitconfig, mount_git_credentials, network_mode,
                         permission_policy)
VALUES
    ('mock-agent', 'Mock agent', 'Scripted, deterministic ACP agent for tests and demos',
     'kandev/mock-agent:latest', '{}', 256, 0.5, 64, 600,
     '{acp,fs}', '{}', '{}', false, false, false, 'none', 'auto_approve'),
    ('augment-agent', 'Augment (auggie)', 'Augment Code CLI agent in ACP mode',
     'augmentcode/auggie-cli:latest', '{auggie,--acp}', 4096, 2.0, 1024, 3600,
     '{acp,fs,terminal}', '{AUGMENT_SESSION_AUTH}', '{GITHUB_TOKEN,GITLAB_TOKEN}',
     true, true, true, 'bridge', 'auto_approve'),
    ('claude-code', 'Claude Code', 'Claude Code through the Claude ACP adapter',
     'kandev/claude-code-acp:latest', '{claude-code-acp}', 4096, 2.0, 1024, 3600,
     '{acp,fs,terminal}', '{ANTHROPIC_API_KEY}', '{GITHUB_TOKEN,GITLAB_TOKEN}',
     true, true, true, 'bridge', 'ask'),
    ('gemini', 'Gemini CLI', 'Gemini CLI in experimental ACP mode',
     'kandev/gemini-cli:latest', '{gemini,--experimental-acp}', 4096, 2.0, 1024, 3600,
     '{acp,fs,terminal}', '{GEMINI_API_KEY}', '{GITHUB_TOKEN,GITLAB_TOKEN}',
     true, true, true, 'bridge', 'ask'),
    ('codex', 'Codex', 'OpenAI Codex through the codex-acp adapter',
     'kandev/codex-acp:latest', '{codex-acp}', 4096, 2.0, 1024, 3600,
     '{acp,fs,terminal}', '{OPENAI_API_KEY}', '{GITHUB_TOKEN,GITLAB_TOKEN}',
     true, true, true, 'bridge', 'ask');

CREATE TABLE agent_instances (
    id               uuid PRIMARY KEY,
    task_id          uuid NOT NULL,
    agent_type       text NOT NULL,
    status           text NOT NULL CHECK (status IN ('pending', 'starting', 'running',
                                                     'completed', 'failed', 'stopped')),
    container_id     text NOT NULL DEFAULT '',
    acp_session_id   text NOT NULL DEFAULT '',
    workspace_path   text NOT NULL DEFAULT '',
    -- true when the manager cloned the workspace (and may delete it)
    workspace_owned  boolean NOT NULL DEFAULT false,
    exit_code        bigint,
    error            text NOT NULL DEFAULT '',
    stop_reason      text NOT NULL DEFAULT '',
    progress         double precision NOT NULL DEFAULT 0,
    last_seq         bigint NOT NULL DEFAULT 0,
    turns            bigint NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX agent_instances_task_idx ON agent_instances (task_id, created_at);

CREATE TABLE agent_logs (
    id           bigserial PRIMARY KEY,
    instance_id  uuid NOT NULL REFERENCES agent_instances (id) ON DELETE CASCADE,
    at           timestamptz NOT NULL DEFAULT now(),
    stream       text NOT NULL CHECK (stream IN ('stderr', 'system')),
    line         text NOT NULL
);
CREATE INDEX agent_logs_instance_idx ON agent_logs (instance_id, id);
