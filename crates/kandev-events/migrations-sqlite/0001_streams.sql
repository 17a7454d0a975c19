-- The durable streams of one process (`LocalStreams`): every message of
-- every stream in publish order, deduplicated by id, and each durable
-- consumer's ack floor.
CREATE TABLE stream_messages (
    stream   TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    msg_id   BLOB NOT NULL,
    subject  TEXT NOT NULL,
    -- A JSON array of [name, value] pairs.
    headers  TEXT NOT NULL DEFAULT '[]',
    payload  BLOB NOT NULL,
    at       TEXT NOT NULL,
    PRIMARY KEY (stream, seq),
    UNIQUE (stream, msg_id)
);
CREATE INDEX stream_messages_subject_idx ON stream_messages (stream, subject, seq);

CREATE TABLE stream_consumers (
    stream    TEXT NOT NULL,
    durable   TEXT NOT NULL,
    ack_floor INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (stream, durable)
);
