-- A chunk's events compressed (LZ4 block, the uncompressed size first as a
-- little-endian u32), `events` then empty. SQLite does not compress what it
-- stores: the feed as JSON text cost about 840 bytes per agent message, and
-- writing it was the largest share of a flood's cost. Chunks written before
-- keep their text.
ALTER TABLE feed_chunks ADD COLUMN events_lz4 BLOB;
