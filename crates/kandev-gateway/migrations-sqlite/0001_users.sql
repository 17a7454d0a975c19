-- Users of the gateway on SQLite (one machine, one file); passwords are
-- argon2id hashes in PHC form. The same table as `migrations/`, with the
-- id a 16-byte blob and the time RFC 3339 text.
CREATE TABLE users (
    id            BLOB PRIMARY KEY,
    username      TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    is_admin      INTEGER NOT NULL DEFAULT 0,
    created_at    TEXT NOT NULL
);
