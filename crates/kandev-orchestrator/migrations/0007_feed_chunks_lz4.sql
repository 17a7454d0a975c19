-- A chunk's events compressed (LZ4 block, the uncompressed size first), as
-- the one-machine `kandev` stores them: `kandev export` moves its chunks
-- over as they are, and readers take `events_lz4` when it is set. Chunks
-- written here keep their text in `events`, compressed by Postgres itself.
ALTER TABLE feed_chunks ADD COLUMN events_lz4 bytea;
