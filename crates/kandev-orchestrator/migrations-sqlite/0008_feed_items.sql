-- The compacted feed (see src/feed/store/items.rs): one item per message,
-- thought or other event of a task, written with the chunks it covers.
-- A row is a whole item, or a piece of the task's last item while it grows
-- (`item_seq`: the first seq of the item it belongs to). Message and
-- thought items hold their chunks' text; other items the event's JSON.
-- Feeds stored before this table are compacted when next read or
-- appended to.
CREATE TABLE feed_items (
    task_id            BLOB NOT NULL,
    first_seq          INTEGER NOT NULL CHECK (first_seq >= 1),
    last_seq           INTEGER NOT NULL CHECK (last_seq >= first_seq),
    item_seq           INTEGER NOT NULL CHECK (item_seq >= 1 AND item_seq <= first_seq),
    instance_id        BLOB NOT NULL,
    first_instance_seq INTEGER NOT NULL CHECK (first_instance_seq >= 1),
    kind               TEXT NOT NULL CHECK (kind IN ('message', 'thought', 'event')),
    -- Message and thought items: `agent` or `user`, the message id and
    -- the first chunk's timestamp as the event gave them.
    role               TEXT,
    message_id         TEXT,
    started_at         TEXT,
    -- The item's text bytes up to the end of this row, and its rows.
    item_bytes         INTEGER NOT NULL,
    pieces             INTEGER NOT NULL,
    -- Empty when `text_lz4` holds it (LZ4 block, the size first), as for
    -- all but small texts: SQLite does not compress what it stores.
    text               TEXT NOT NULL,
    text_lz4           BLOB,
    PRIMARY KEY (task_id, first_seq)
);
CREATE INDEX feed_items_item_idx ON feed_items (task_id, item_seq, first_seq);
