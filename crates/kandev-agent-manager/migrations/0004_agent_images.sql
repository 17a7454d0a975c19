-- The real agents' images are the ones built from dockerfiles/<agent-type>
-- (kandev/<agent-type>:latest), with each adapter's current command. Rows an
-- operator changed keep their values.
UPDATE agent_types SET image = 'kandev/augment-agent:latest', updated_at = now()
 WHERE id = 'augment-agent' AND image = 'augmentcode/auggie-cli:latest';
UPDATE agent_types SET image = 'kandev/claude-code:latest', command = '{claude-agent-acp}',
       description = 'Claude Code through the Claude agent ACP adapter', updated_at = now()
 WHERE id = 'claude-code' AND image = 'kandev/claude-code-acp:latest';
UPDATE agent_types SET image = 'kandev/gemini:latest', command = '{gemini,--acp}',
       description = 'Gemini CLI in ACP mode', updated_at = now()
 WHERE id = 'gemini' AND image = 'kandev/gemini-cli:latest';
UPDATE agent_types SET image = 'kandev/codex:latest', updated_at = now()
 WHERE id = 'codex' AND image = 'kandev/codex-acp:latest';
