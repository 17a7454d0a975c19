-- The feed in chunks: each row a run of consecutive events of one task from
-- one agent instance, their JSON texts in one array. A row per event cost a
-- heap tuple and two index entries per agent message; a chunk costs them
-- once per write batch, and its array is stored compressed.
CREATE TABLE feed_chunks (
    task_id            uuid NOT NULL,
    first_seq          bigint NOT NULL CHECK (first_seq >= 1),
    last_seq           bigint NOT NULL CHECK (last_seq >= first_seq),
    instance_id        uuid NOT NULL,
    first_instance_seq bigint NOT NULL CHECK (first_instance_seq >= 1),
    -- A JSON array of the events, `first_seq..=last_seq` in order.
    events             text NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, first_seq)
);
CREATE INDEX feed_chunks_instance_idx ON feed_chunks (instance_id, first_instance_seq);

-- LZ4 where the server has it (fast, and JSON compresses well).
DO $$
BEGIN
    ALTER TABLE feed_chunks ALTER COLUMN events SET COMPRESSION lz4;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'lz4 is not available; feed chunks use the default compression';
END $$;

-- Existing events move over as chunks of one.
INSERT INTO feed_chunks (task_id, first_seq, last_seq, instance_id, first_instance_seq, events, created_at)
SELECT task_id, seq, seq, instance_id, instance_seq, '[' || event::text || ']', created_at FROM feed;
DROP TABLE feed;
