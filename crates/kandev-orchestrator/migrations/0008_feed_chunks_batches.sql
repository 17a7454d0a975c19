-- A chunk that is an agent manager's whole `acp.message` batch keeps the
-- batch's LZ4 bytes in `events_lz4` as they came. They do not compress
-- again: stored out of line as they are, Postgres does not try.
ALTER TABLE feed_chunks ALTER COLUMN events_lz4 SET STORAGE EXTERNAL;
