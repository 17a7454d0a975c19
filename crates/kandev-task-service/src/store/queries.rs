//! Every statement the task service runs, written once for both databases.
//!
//! Postgres and SQLite agree on all of these as written: parameters are
//! numbered `$1`, `$2`, … (sqlx's SQLite driver binds `$N` as it binds
//! `?N`, and a number used twice is one parameter in both), `RETURNING`
//! works in both (SQLite since 3.35), and no statement uses a function or
//! a cast only one of them knows (`CAST(… AS TEXT)`, `coalesce`, `max`,
//! `count` are common to both). Values are bound, never spliced, and bound
//! the same way in both, except timestamps (see [`super::dialect`]); every
//! timestamp is bound by the store, so neither database's clock or column
//! default decides one.
//!
//! What the two still do differently is in [`super::dialect::Dialect`]:
//! how a change's transaction begins, whether a read locks its rows
//! (`FOR UPDATE`, appended by [`super::dialect::for_update`]), how a
//! timestamp is stored, and how the outbox relay claims its batch.
//!
//! Why text and not a query builder: sea-query (maintained, 1.0 in 2025,
//! bound to sqlx through `sea-query-binder`) would render these same
//! texts from builder calls, three or four lines of Rust for each line of
//! SQL, and tie the workspace's sqlx upgrades to the binder's releases;
//! yet it settles none of the differences above: they are in how a
//! transaction is held and how a value is encoded (its SQLite binder
//! would store a timestamp in sqlx's variable-width form, which does not
//! sort as time does), not in the SQL. With twenty fixed statements and
//! one rendered one ([`tasks_of_board`]), one text per query is shorter
//! and reads as what it runs.

/// The columns of a [`super::BoardRow`].
macro_rules! board_columns {
    () => {
        "id, name, description, owner, created_at, updated_at"
    };
}

/// The columns of a [`super::TaskRow`].
macro_rules! task_columns {
    () => {
        "id, board_id, title, description, state, priority, agent_type, repository_url, branch, \
         workspace_path, metadata, max_retries, autostart, created_by, position, version, \
         column_id, queued, parent_id, blocked, created_at, updated_at"
    };
}

// Boards.

/// ($1 id, $2 name, $3 description, $4 owner, $5 now) → board.
pub const INSERT_BOARD: &str = concat!(
    "INSERT INTO boards (id, name, description, owner, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $5) RETURNING ",
    board_columns!()
);

/// ($1 id) → board.
pub const BOARD: &str = concat!("SELECT ", board_columns!(), " FROM boards WHERE id = $1");

/// ($1 owner or NULL for all, $2 limit, $3 offset) → boards, oldest first.
pub const BOARDS: &str = concat!(
    "SELECT ",
    board_columns!(),
    " FROM boards WHERE ($1 IS NULL OR owner = $1) ORDER BY created_at, id LIMIT $2 OFFSET $3"
);

/// ($1 id, $2 name or NULL, $3 description or NULL, $4 now) → board.
pub const UPDATE_BOARD: &str = concat!(
    "UPDATE boards SET name = coalesce($2, name), description = coalesce($3, description), \
     updated_at = $4 WHERE id = $1 RETURNING ",
    board_columns!()
);

/// ($1 id) → its id: the board whose holder places tasks at column ends
/// (locked with [`super::dialect::for_update`]).
pub const BOARD_ID: &str = "SELECT id FROM boards WHERE id = $1";

/// ($1 id): its tasks go with it (`ON DELETE CASCADE`).
pub const DELETE_BOARD: &str = "DELETE FROM boards WHERE id = $1";

// Tasks.

/// The columns a patch may change, in the order the store binds them.
macro_rules! task_fields {
    () => {
        "title, description, priority, agent_type, repository_url, branch, workspace_path, \
         metadata, max_retries, position, autostart"
    };
}

/// ($1 id, $2 board, $3 state, $4 created by, $5 version, $6 now, $7
/// column or NULL, $8 parent or NULL, $9 … $19 the fields of `task_fields`
/// in order) → task.
pub const INSERT_TASK: &str = concat!(
    "INSERT INTO tasks (id, board_id, state, created_by, version, created_at, updated_at, \
     column_id, parent_id, ",
    task_fields!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, \
     $18, $19) RETURNING ",
    task_columns!()
);

/// ($1 id) → task.
pub const TASK: &str = concat!("SELECT ", task_columns!(), " FROM tasks WHERE id = $1");

/// ($1 id) → the task's board.
pub const TASK_BOARD: &str = "SELECT board_id FROM tasks WHERE id = $1";

/// ($1 board) → its tasks, by column position.
pub const BOARD_TASKS: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM tasks WHERE board_id = $1 ORDER BY position, id"
);

/// ($1 board, $2 state) → the last position in that column, if any.
pub const LAST_POSITION: &str =
    "SELECT max(position) FROM tasks WHERE board_id = $1 AND state = $2";

/// ($1 board, $2 limit, $3 offset, $4 … one state each) → its tasks in
/// those states, by column position. Rendered for the number of states:
/// a list of parameters reads the same in both databases, where an array
/// parameter would not (Postgres `= ANY($4)`, SQLite `json_each`).
pub fn tasks_of_board(states: usize) -> String {
    let set: Vec<String> = (4..4 + states).map(|n| format!("${n}")).collect();
    format!(
        concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE board_id = $1 AND state IN ({}) \
             ORDER BY position, created_at, id LIMIT $2 OFFSET $3"
        ),
        set.join(", ")
    )
}

/// ($1 id, $2 now, $3 … $13 the fields of `task_fields` in order) →
/// task, one version on.
pub const UPDATE_TASK: &str = concat!(
    "UPDATE tasks SET version = version + 1, updated_at = $2, title = $3, description = $4, \
     priority = $5, agent_type = $6, repository_url = $7, branch = $8, workspace_path = $9, \
     metadata = $10, max_retries = $11, position = $12, autostart = $13 \
     WHERE id = $1 RETURNING ",
    task_columns!()
);

/// ($1 id, $2 state, $3 position, $4 metadata, $5 agent type, $6 autostart,
/// $7 column or NULL, $8 queued, $9 now) → task, one version on: a move
/// across columns.
pub const PLACE_TASK: &str = concat!(
    "UPDATE tasks SET state = $2, position = $3, metadata = $4, agent_type = $5, autostart = $6, \
     column_id = $7, queued = $8, version = version + 1, updated_at = $9 WHERE id = $1 RETURNING ",
    task_columns!()
);

/// ($1 id).
pub const DELETE_TASK: &str = "DELETE FROM tasks WHERE id = $1";

// Subtasks and blockers.

/// ($1 board) → the `(task, blocker)` links among its tasks.
pub const BOARD_LINKS: &str = "SELECT l.task_id, l.blocker_id FROM task_blockers l \
     JOIN tasks t ON t.id = l.task_id WHERE t.board_id = $1";

/// ($1 task).
pub const DELETE_BLOCKERS: &str = "DELETE FROM task_blockers WHERE task_id = $1";

/// ($1 task, $2 blocker).
pub const INSERT_BLOCKER: &str = "INSERT INTO task_blockers (task_id, blocker_id) VALUES ($1, $2)";

/// ($1 blocker) → the tasks waiting for it.
pub const DEPENDENTS: &str = "SELECT task_id FROM task_blockers WHERE blocker_id = $1";

/// ($1 task, $2 'COMPLETED') → how many of its blockers are not completed.
pub const HOLDING_BLOCKERS: &str = "SELECT count(*) FROM task_blockers l \
     JOIN tasks b ON b.id = l.blocker_id WHERE l.task_id = $1 AND b.state <> $2";

/// ($1 id, $2 blocked, $3 now) → task, one version on.
pub const SET_BLOCKED: &str = concat!(
    "UPDATE tasks SET blocked = $2, version = version + 1, updated_at = $3 WHERE id = $1 \
     RETURNING ",
    task_columns!()
);

/// ($1 board) → `(task, blocker id, title, state)` of each link among its
/// tasks, in the order the links' blockers were created.
pub const BOARD_BLOCKERS: &str = "SELECT l.task_id, b.id, b.title, b.state FROM task_blockers l \
     JOIN tasks b ON b.id = l.blocker_id WHERE b.board_id = $1 ORDER BY b.created_at, b.id";

/// ($1 board) → `(parent, subtask)` of its subtasks, oldest first.
pub const BOARD_SUBTASKS: &str = "SELECT parent_id, id FROM tasks \
     WHERE board_id = $1 AND parent_id IS NOT NULL ORDER BY created_at, id";

// Workflow columns.

/// The columns of a [`super::workflow::ColumnRow`].
macro_rules! column_columns {
    () => {
        "id, board_id, name, position, colour, state, wip_limit, agent_type, prompt_template, \
         on_success, on_failure, new_session, profile_id"
    };
}

/// ($1 board) → its columns, left to right.
pub const COLUMNS: &str = concat!(
    "SELECT ",
    column_columns!(),
    " FROM board_columns WHERE board_id = $1 ORDER BY position, id"
);

/// ($1 column) → its board, whichever board that is.
pub const COLUMN_BOARD: &str = "SELECT board_id FROM board_columns WHERE id = $1";

/// ($1 id, $2 board, $3 name, $4 position, $5 colour, $6 state, $7 WIP
/// limit, $8 agent type, $9 prompt template, $10 on success, $11 on
/// failure): a new column, or a column of the same board changed.
pub const UPSERT_COLUMN: &str = concat!(
    "INSERT INTO board_columns (",
    column_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) ON CONFLICT (id) DO UPDATE SET \
     name = excluded.name, position = excluded.position, colour = excluded.colour, \
     state = excluded.state, wip_limit = excluded.wip_limit, agent_type = excluded.agent_type, \
     prompt_template = excluded.prompt_template, on_success = excluded.on_success, \
     on_failure = excluded.on_failure, new_session = excluded.new_session, \
     profile_id = excluded.profile_id WHERE board_columns.board_id = excluded.board_id"
);

/// ($1 column, $2 false): its cards leave it (a column being removed).
pub const UNPLACE_COLUMN: &str =
    "UPDATE tasks SET column_id = NULL, queued = $2 WHERE column_id = $1";

/// ($1 column).
pub const DELETE_COLUMN: &str = "DELETE FROM board_columns WHERE id = $1";

/// ($1 board, $2 false): each card in no column goes to the first column
/// of its state (none when no column maps it).
pub const PLACE_UNPLACED: &str = "UPDATE tasks SET queued = $2, column_id = \
     (SELECT c.id FROM board_columns c WHERE c.board_id = tasks.board_id AND c.state = tasks.state \
      ORDER BY c.position LIMIT 1) WHERE board_id = $1 AND column_id IS NULL";

/// ($1 column, $2 a task not to count) → how many cards hold a slot of it.
pub const COLUMN_OCCUPANCY: &str =
    "SELECT count(*) FROM tasks WHERE column_id = $1 AND NOT queued AND id <> $2";

/// ($1 column) → the first card of its queue.
pub const QUEUE_HEAD: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM tasks WHERE column_id = $1 AND queued ORDER BY position, id LIMIT 1"
);

// History and outbox.

/// ($1 id, $2 task, $3 board, $4 kind, $5 actor, $6 old, $7 new, $8 now).
pub const INSERT_EVENT: &str = "INSERT INTO task_events \
     (id, task_id, board_id, kind, actor, old_value, new_value, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

/// ($1 task, $2 limit, $3 offset) → its history, oldest first.
pub const EVENTS: &str = "SELECT id, task_id, board_id, kind, actor, old_value, new_value, \
     created_at FROM task_events WHERE task_id = $1 ORDER BY seq LIMIT $2 OFFSET $3";

/// ($1 event id, $2 subject, $3 envelope, $4 traceparent, $5 now).
pub const INSERT_OUTBOX: &str = "INSERT INTO outbox \
     (event_id, subject, payload, traceparent, created_at) VALUES ($1, $2, $3, $4, $5)";

/// ($1 limit) → the oldest events, in commit order (the envelope as text).
pub const OUTBOX_BATCH: &str = "SELECT id, event_id, subject, CAST(payload AS TEXT), traceparent \
     FROM outbox ORDER BY id LIMIT $1";

/// () → how many events wait.
pub const OUTBOX_PENDING: &str = "SELECT count(*) FROM outbox";

/// () → whether the database answers.
pub const PING: &str = "SELECT 1";

#[cfg(test)]
mod tests {
    #[test]
    fn a_state_set_is_one_parameter_per_state_after_the_page() {
        let sql = super::tasks_of_board(3);
        assert!(sql.contains("state IN ($4, $5, $6) ORDER BY"), "{sql}");
        assert!(sql.ends_with("LIMIT $2 OFFSET $3"), "{sql}");
    }
}
