-- The same as the Postgres migration `migrations/0008_column_profile.sql`.
ALTER TABLE board_columns ADD COLUMN profile_id BLOB;
