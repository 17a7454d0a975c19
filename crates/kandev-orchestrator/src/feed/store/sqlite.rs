//! The feed in a SQLite file: the chunks of a batch and the compacted
//! view's rows written in one transaction, each compressed when it is not
//! small (`events_lz4`, `text_lz4`: SQLite stores text as it is, and the
//! feed's text was most of what a flood wrote).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use kandev_common::db::dialect::{self, Stmt};
use sqlx::{Sqlite, SqliteConnection};
use uuid::Uuid;

use super::{
    Chunk, Result,
    db::{DbFeedStore, FeedDb},
    items::sql,
    pack,
};

/// Item texts from this size on are stored compressed.
const PACK_FROM: usize = 512;

/// The orchestrator's feed tables in SQLite.
pub type SqliteFeedStore = DbFeedStore<Sqlite>;

#[async_trait]
impl FeedDb for Sqlite {
    /// Nothing: the change's `BEGIN IMMEDIATE` holds the file's write
    /// lock, so writers of the file take turns.
    async fn lock_items(_: &mut SqliteConnection, _: &[Uuid]) -> Result<()> {
        Ok(())
    }

    async fn insert_chunks(
        conn: &mut SqliteConnection,
        rows: &[Chunk],
        now: DateTime<Utc>,
    ) -> Result<()> {
        let stmt = rows
            .iter()
            .fold(Stmt::new(sql::insert_chunks(rows.len())), |stmt, c| {
                stmt.bind(c.task_id)
                    .bind(c.first_seq)
                    .bind(c.last_seq)
                    .bind(c.instance_id)
                    .bind(c.first_instance_seq)
                    .bind("")
                    .bind(match &c.batch {
                        Some(batch) => batch.to_vec(),
                        None => pack(&c.events),
                    })
                    .bind(now)
            });
        dialect::execute::<Sqlite>(conn, stmt).await
    }

    fn item_text(text: &str) -> (String, Option<Vec<u8>>) {
        if text.len() >= PACK_FROM {
            (String::new(), Some(pack(text)))
        } else {
            (text.to_owned(), None)
        }
    }
}
