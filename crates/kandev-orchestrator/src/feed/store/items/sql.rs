//! The statements both databases run as they are (SQLite reads `$n` as
//! the n-th bound value).

pub const LAST_ROW: &str = "SELECT first_seq, last_seq, item_seq, instance_id, first_instance_seq, kind, role, message_id, started_at, item_bytes, pieces
     FROM feed_items WHERE task_id = $1 ORDER BY first_seq DESC LIMIT 1";
pub const COVERED: &str =
    "SELECT last_seq FROM feed_items WHERE task_id = $1 ORDER BY first_seq DESC LIMIT 1";
/// The chunks of `$1` that may hold seqs after `$4` (those starting in
/// `$2 < first_seq <= $3`): the columns of [`super::super::ChunkRow`].
pub const HISTORY: &str =
    "SELECT first_seq, last_seq, instance_id, first_instance_seq, events, events_lz4
     FROM feed_chunks
     WHERE task_id = $1 AND first_seq > $2 AND first_seq <= $3 AND last_seq > $4
     ORDER BY first_seq";
/// The first seqs of the newest `$3` items starting before `$2`, and
/// their first rows' text bytes (a whole item's but the last one's).
pub const PAGE_HEADS: &str = "SELECT first_seq, item_bytes FROM feed_items
     WHERE task_id = $1 AND first_seq = item_seq AND first_seq < $2
     ORDER BY first_seq DESC LIMIT $3";
/// Every row of the items that start in `$2..=$3`.
pub const PAGE_ROWS: &str = "SELECT first_seq, last_seq, item_seq, instance_id, first_instance_seq, kind, role, message_id, started_at, item_bytes, pieces, text, text_lz4
     FROM feed_items WHERE task_id = $1 AND item_seq >= $2 AND item_seq <= $3
     ORDER BY item_seq, first_seq";
/// The most tasks [`last_rows`] reads in one statement.
pub const TASKS_PER_READ: usize = 64;

/// One statement text per count from 0 to [`TASKS_PER_READ`]: `each(k)`
/// for `k` in `0..count`, joined by `sep`, then `tail`.
fn per_count(each: fn(usize) -> String, sep: &str, tail: &str) -> Vec<String> {
    (0..=TASKS_PER_READ)
        .map(|n| {
            let parts: Vec<String> = (0..n).map(each).collect();
            format!("{}{tail}", parts.join(sep))
        })
        .collect()
}

/// The last row of each of `tasks` tasks (`$1..=$tasks`), with its
/// task id first: one indexed read per task in one statement.
pub fn last_rows(tasks: usize) -> &'static str {
    static SQL: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
        per_count(
            |k| {
                let k = k + 1;
                format!(
                    "SELECT * FROM (SELECT task_id, first_seq, last_seq, item_seq, instance_id,
                       first_instance_seq, kind, role, message_id, started_at, item_bytes, pieces
                     FROM feed_items WHERE task_id = ${k} ORDER BY first_seq DESC LIMIT 1) AS t{k}"
                )
            },
            " UNION ALL ",
            "",
        )
    });
    &SQL[tasks]
}

/// The stored rows' text of `items` items (`$1, $2` the first's task id
/// and item seq, and so on), each row numbered by its item's place in the
/// list: one indexed read per item in one statement.
pub fn item_texts(items: usize) -> &'static str {
    static SQL: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
        per_count(
            |k| {
                format!(
                    "SELECT CAST({k} AS BIGINT) AS n, first_seq, text, text_lz4 FROM feed_items
                     WHERE task_id = ${} AND item_seq = ${}",
                    2 * k + 1,
                    2 * k + 2
                )
            },
            " UNION ALL ",
            " ORDER BY n, first_seq",
        )
    });
    &SQL[items]
}

/// Deletes the rows of `items` items (as [`item_texts`] lists them).
pub fn delete_items(items: usize) -> &'static str {
    static SQL: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
        per_count(
            |k| format!("(task_id = ${} AND item_seq = ${})", 2 * k + 1, 2 * k + 2),
            " OR ",
            "",
        )
        .into_iter()
        .map(|each| format!("DELETE FROM feed_items WHERE {each}"))
        .collect()
    });
    &SQL[items]
}

pub const COLUMNS: usize = 14;
/// The most rows one `INSERT` writes (14 parameters each). SQLite's
/// driver looks each parameter's name up in a list as long as the
/// statement's (`sqlite3_bind_parameter_name`): binding costs the square of
/// the parameters, 3 % of `kandev`'s CPU at 64 rows in the realistic load.
pub const ROWS_PER_INSERT: usize = 32;

/// `INSERT … VALUES` of `rows` rows; one text per row count, made once.
pub fn insert(rows: usize) -> &'static str {
    static SQL: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
        kandev_common::db::multi_row(
            "INSERT INTO feed_items (task_id, first_seq, last_seq, item_seq, instance_id,
               first_instance_seq, kind, role, message_id, started_at, item_bytes, pieces,
               text, text_lz4)
             VALUES",
            COLUMNS,
            ROWS_PER_INSERT,
            "",
        )
    });
    &SQL[rows]
}

/// Parameters of one chunk in [`insert_chunks`].
pub const CHUNK_PARAMS: usize = 8;
/// The most chunks one `INSERT` writes (see [`ROWS_PER_INSERT`]).
pub const CHUNKS_PER_INSERT: usize = 32;

/// `INSERT … VALUES` of `rows` feed chunks (each: task id, first and last
/// seq, instance id, first instance seq, events, packed events, created
/// at); one text per row count, made once.
pub fn insert_chunks(rows: usize) -> &'static str {
    static SQL: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
        kandev_common::db::multi_row(
            "INSERT INTO feed_chunks (task_id, first_seq, last_seq, instance_id,
               first_instance_seq, events, events_lz4, created_at)
             VALUES",
            CHUNK_PARAMS,
            CHUNKS_PER_INSERT,
            " ON CONFLICT DO NOTHING",
        )
    });
    &SQL[rows]
}
