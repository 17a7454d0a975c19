-- The agent manager's tables on SQLite (one machine, one file): the tables
-- the Postgres migrations (`migrations/`) arrive at, in SQLite's types, and
-- the same seeded registry. Lists are JSON arrays, ids 16-byte blobs,
-- timestamps RFC 3339 text with six fractional digits.

CREATE TABLE agent_types (
    id                    TEXT PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 64),
    name                  TEXT NOT NULL,
    description           TEXT NOT NULL DEFAULT '',
    image                 TEXT NOT NULL CHECK (length(image) > 0),
    command               TEXT NOT NULL DEFAULT '[]' CHECK (json_type(command) = 'array'),
    working_dir           TEXT NOT NULL DEFAULT '/workspace',
    memory_mb             INTEGER NOT NULL DEFAULT 2048 CHECK (memory_mb > 0),
    cpu_cores             REAL NOT NULL DEFAULT 1.0 CHECK (cpu_cores > 0),
    pids_limit            INTEGER NOT NULL DEFAULT 512 CHECK (pids_limit > 0),
    timeout_seconds       INTEGER NOT NULL DEFAULT 3600 CHECK (timeout_seconds > 0),
    capabilities          TEXT NOT NULL DEFAULT '[]' CHECK (json_type(capabilities) = 'array'),
    required_env          TEXT NOT NULL DEFAULT '[]' CHECK (json_type(required_env) = 'array'),
    optional_env          TEXT NOT NULL DEFAULT '[]' CHECK (json_type(optional_env) = 'array'),
    mount_ssh             INTEGER NOT NULL DEFAULT 0,
    mount_gitconfig       INTEGER NOT NULL DEFAULT 0,
    mount_git_credentials INTEGER NOT NULL DEFAULT 0,
    network_mode          TEXT NOT NULL DEFAULT 'none',
    permission_policy     TEXT NOT NULL DEFAULT 'auto_approve'
                          CHECK (permission_policy IN ('auto_approve', 'deny', 'ask')),
    enabled               INTEGER NOT NULL DEFAULT 1,
    home_volume           TEXT NOT NULL DEFAULT '',
    internal              INTEGER NOT NULL DEFAULT 0,
    host_credentials      INTEGER NOT NULL DEFAULT 0,
    created_at            TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at            TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

INSERT INTO agent_types (id, name, description, image, command, memory_mb, cpu_cores, pids_limit,
                         timeout_seconds, capabilities, required_env, optional_env,
                         mount_ssh, mount_gitconfig, mount_git_credentials, network_mode,
                         permission_policy, home_volume, internal)
VALUES
    ('mock-agent', 'Mock agent', 'Scripted, deterministic ACP agent for tests and demos',
     'kandev/mock-agent:latest', '[]', 256, 0.5, 64, 600,
     '["acp","fs"]', '[]', '[]', 0, 0, 0, 'none', 'auto_approve', '', 1),
    ('augment-agent', 'Augment (auggie)', 'Augment Code CLI agent in ACP mode',
     'kandev/augment-agent:latest', '["auggie","--acp"]', 4096, 2.0, 1024, 3600,
     '["acp","fs","terminal"]', '["AUGMENT_SESSION_AUTH"]', '["GITHUB_TOKEN","GITLAB_TOKEN"]',
     1, 1, 1, 'bridge', 'auto_approve', '/home/agent/.augment/sessions', 0),
    ('auggie-cli', 'Auggie CLI', 'Augment Code CLI agent in ACP mode (the seed''s auggie-cli)',
     'kandev/augment-agent:latest', '["auggie","--acp"]', 4096, 2.0, 1024, 3600,
     '["acp","fs","terminal"]', '["AUGMENT_SESSION_AUTH"]', '["GITHUB_TOKEN","GITLAB_TOKEN"]',
     1, 1, 1, 'bridge', 'auto_approve', '/home/agent/.augment/sessions', 0),
    ('claude-code', 'Claude Code', 'Claude Code through the Claude agent ACP adapter',
     'kandev/claude-code:latest', '["claude-agent-acp"]', 4096, 2.0, 1024, 3600,
     '["acp","fs","terminal"]', '["ANTHROPIC_API_KEY"]', '["GITHUB_TOKEN","GITLAB_TOKEN"]',
     1, 1, 1, 'bridge', 'ask', '', 0),
    ('gemini', 'Gemini CLI', 'Gemini CLI in ACP mode',
     'kandev/gemini:latest', '["gemini","--acp"]', 4096, 2.0, 1024, 3600,
     '["acp","fs","terminal"]', '["GEMINI_API_KEY"]', '["GITHUB_TOKEN","GITLAB_TOKEN"]',
     1, 1, 1, 'bridge', 'ask', '', 0),
    ('codex', 'Codex', 'OpenAI Codex through the codex-acp adapter',
     'kandev/codex:latest', '["codex-acp"]', 4096, 2.0, 1024, 3600,
     '["acp","fs","terminal"]', '["OPENAI_API_KEY"]', '["GITHUB_TOKEN","GITLAB_TOKEN"]',
     1, 1, 1, 'bridge', 'ask', '', 0),
    ('seed-agent', 'Seed example agent',
     'The example agent.sh of the seed''s AGENTS.md, for demos and tests',
     'kandev/seed-agent:latest', '["/usr/local/bin/agent","--acp"]', 128, 0.5, 64, 600,
     '["acp"]', '[]', '[]', 0, 0, 0, 'none', 'auto_approve', '', 1);

CREATE TABLE agent_instances (
    id               BLOB PRIMARY KEY,
    task_id          BLOB NOT NULL,
    agent_type       TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('pending', 'starting', 'running',
                                                     'completed', 'failed', 'stopped')),
    container_id     TEXT NOT NULL DEFAULT '',
    acp_session_id   TEXT NOT NULL DEFAULT '',
    workspace_path   TEXT NOT NULL DEFAULT '',
    workspace_owned  INTEGER NOT NULL DEFAULT 0,
    exit_code        INTEGER,
    error            TEXT NOT NULL DEFAULT '',
    stop_reason      TEXT NOT NULL DEFAULT '',
    progress         REAL NOT NULL DEFAULT 0,
    last_seq         INTEGER NOT NULL DEFAULT 0,
    turns            INTEGER NOT NULL DEFAULT 0,
    stdout_lines     INTEGER NOT NULL DEFAULT 0,
    stderr_lines     INTEGER NOT NULL DEFAULT 0,
    sync_event       TEXT,
    priority         INTEGER NOT NULL DEFAULT 0,
    metadata         TEXT NOT NULL DEFAULT '{}' CHECK (json_type(metadata) = 'object'),
    home_scope       TEXT NOT NULL DEFAULT '',
    manager_id       TEXT NOT NULL DEFAULT '',
    created_at       TEXT NOT NULL,
    started_at       TEXT,
    finished_at      TEXT,
    updated_at       TEXT NOT NULL
);
CREATE INDEX agent_instances_task_idx ON agent_instances (task_id, created_at);
CREATE INDEX agent_instances_active_by_manager ON agent_instances (manager_id)
    WHERE status IN ('pending', 'starting', 'running');

CREATE TABLE agent_logs (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id  BLOB NOT NULL REFERENCES agent_instances (id) ON DELETE CASCADE,
    at           TEXT NOT NULL,
    stream       TEXT NOT NULL CHECK (stream IN ('stderr', 'system')),
    line         TEXT NOT NULL
);
CREATE INDEX agent_logs_instance_idx ON agent_logs (instance_id, id);

-- Each user's own credentials for their agents, encrypted (see the
-- Postgres migration 0009).
CREATE TABLE user_secrets (
    scope       TEXT NOT NULL,
    name        TEXT NOT NULL,
    nonce       BLOB NOT NULL,
    ciphertext  BLOB NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (scope, name)
);
