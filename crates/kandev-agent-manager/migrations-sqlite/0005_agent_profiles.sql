-- Postgres migration 0014 on SQLite: agent profiles, owned by a user
-- (owner = the user's name) or shared by an admin (owner = ''); the
-- settings are one JSON document naming the owner's secrets, never their
-- values.
CREATE TABLE agent_profiles (
    id          BLOB NOT NULL PRIMARY KEY,
    owner       TEXT NOT NULL,
    agent_type  TEXT NOT NULL REFERENCES agent_types (id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    spec        TEXT NOT NULL CHECK (json_type(spec) = 'object'),
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    UNIQUE (owner, agent_type, name)
);
