-- The compacted feed (see src/feed/store/items.rs): one item per message,
-- thought or other event of a task, written with the chunks it covers.
-- A row is a whole item, or a piece of the task's last item while it grows
-- (`item_seq`: the first seq of the item it belongs to). Message and
-- thought items hold their chunks' text; other items the event's JSON.
-- Feeds stored before this table are compacted when next read or
-- appended to.
CREATE TABLE feed_items (
    task_id            uuid NOT NULL,
    first_seq          bigint NOT NULL CHECK (first_seq >= 1),
    last_seq           bigint NOT NULL CHECK (last_seq >= first_seq),
    item_seq           bigint NOT NULL CHECK (item_seq >= 1 AND item_seq <= first_seq),
    instance_id        uuid NOT NULL,
    first_instance_seq bigint NOT NULL CHECK (first_instance_seq >= 1),
    kind               text NOT NULL CHECK (kind IN ('message', 'thought', 'event')),
    -- Message and thought items: `agent` or `user`, the message id and
    -- the first chunk's timestamp as the event gave them.
    role               text,
    message_id         text,
    started_at         text,
    -- The item's text bytes up to the end of this row, and its rows.
    item_bytes         bigint NOT NULL,
    pieces             bigint NOT NULL,
    text               text NOT NULL,
    -- The text compressed (LZ4 block, the size first), `text` then empty:
    -- as the one-machine `kandev` stores it (`kandev export` copies it).
    text_lz4           bytea,
    PRIMARY KEY (task_id, first_seq)
);
CREATE INDEX feed_items_item_idx ON feed_items (task_id, item_seq, first_seq);

DO $$
BEGIN
    ALTER TABLE feed_items ALTER COLUMN text SET COMPRESSION lz4;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'lz4 is not available; feed items use the default compression';
END $$;
