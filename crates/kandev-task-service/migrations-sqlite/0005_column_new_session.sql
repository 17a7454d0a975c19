-- The same as the Postgres migration `migrations/0007_column_new_session.sql`.
ALTER TABLE board_columns ADD COLUMN new_session INTEGER NOT NULL DEFAULT 0;
