-- Agent profiles (issue 42): named settings on an agent type, owned by a
-- user (owner = the user's name) or shared by an admin (owner = ''). The
-- settings are one JSON document (model, mode, instructions, env and MCP
-- servers); it names the owner's secrets, never holds their values.
CREATE TABLE agent_profiles (
    id          uuid        PRIMARY KEY,
    owner       text        NOT NULL,
    agent_type  text        NOT NULL REFERENCES agent_types (id) ON DELETE CASCADE,
    name        text        NOT NULL,
    spec        jsonb       NOT NULL CHECK (jsonb_typeof(spec) = 'object'),
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    UNIQUE (owner, agent_type, name)
);
