//! The workflow's storage contract (issue 41), run on both databases by
//! `contract!` in `contract.rs`: a new board's default workflow, cards that
//! follow their state, an automated plan → implement → review workflow
//! moving a card by itself, a WIP limit of 1 queueing the second card and
//! letting it in when the first leaves, and bad moves refused.

use kandev_task_service::{
    TaskError,
    domain::{BoardName, NewBoard, NewTask, StateChange, Task, TaskState, TaskTitle},
    startup::Storage,
    workflow::{
        Column, ColumnInput, WORKFLOW_NEW_SESSION, WORKFLOW_PROFILE, WORKFLOW_PROMPT, parse_columns,
    },
};
use serde_json::{Value, json};
use uuid::Uuid;

fn board(owner: &str) -> NewBoard {
    NewBoard {
        name: BoardName::parse("flow").unwrap(),
        description: String::new(),
        owner: owner.into(),
    }
}

fn task(board_id: Uuid, title: &str) -> NewTask {
    NewTask {
        description: "the details".into(),
        max_retries: 0,
        autostart: false,
        ..NewTask::new(board_id, TaskTitle::parse(title).unwrap(), "alice")
    }
}

fn change(to: TaskState, actor: &str, metadata: Option<Value>) -> StateChange {
    StateChange {
        to,
        expected_version: None,
        actor: actor.into(),
        reason: "test".into(),
        metadata_patch: metadata.and_then(|m| m.as_object().cloned()),
    }
}

fn prompt(t: &Task) -> Option<&str> {
    t.metadata.get(WORKFLOW_PROMPT).and_then(Value::as_str)
}

/// The agent profile the Plan column's runs use.
const PLAN_PROFILE: &str = "0193c1c4-0000-7000-8000-0000000091a0";

/// The profile the run the task's column starts uses, when not its own.
fn column_profile(t: &Task) -> Option<&str> {
    t.metadata.get(WORKFLOW_PROFILE).and_then(Value::as_str)
}

/// Whether the run the task's column starts asks for a new session.
fn new_session(t: &Task) -> bool {
    t.metadata.get(WORKFLOW_NEW_SESSION) == Some(&Value::Bool(true))
}

/// Backlog → Plan (WIP 1) → Implement → Review, Failed on failure.
fn three_steps(board_id: Uuid) -> Vec<Column> {
    let ids: Vec<String> = (0..5).map(|_| Uuid::now_v7().to_string()).collect();
    let col = |i: usize, name: &str, state: &str| ColumnInput {
        id: Some(ids[i].clone()),
        name: name.into(),
        state: state.into(),
        ..Default::default()
    };
    let automated = |i: usize, name: &str, template: &str, next: usize| ColumnInput {
        agent_type: Some("mock-agent".into()),
        prompt_template: template.into(),
        on_success: Some(ids[next].clone()),
        on_failure: Some(ids[4].clone()),
        ..col(i, name, "IN_PROGRESS")
    };
    let mut plan = automated(1, "Plan", "plan {title}: {description}", 2);
    plan.wip_limit = Some(1);
    plan.profile_id = Some(PLAN_PROFILE.into());
    let mut implement = automated(2, "Implement", "implement {title} following: {summary}", 3);
    implement.new_session = true;
    let inputs = vec![
        col(0, "Backlog", "TODO"),
        plan,
        implement,
        col(3, "Review", "REVIEW"),
        col(4, "Failed", "FAILED"),
    ];
    parse_columns(board_id, inputs).unwrap()
}

pub(crate) async fn a_new_board_has_the_default_workflow_and_cards_follow_their_state(
    storage: &Storage,
) {
    let store = &storage.tasks;
    let b = store.create_board(board("alice")).await.unwrap();
    let columns = store.list_columns(b.id).await.unwrap();
    let states: Vec<TaskState> = columns.iter().map(|c| c.state).collect();
    assert_eq!(states, TaskState::ALL.to_vec(), "one column per state");
    assert_eq!(columns[0].name, "To do");
    assert!(
        columns
            .iter()
            .all(|c| !c.is_automated() && c.wip_limit.is_none())
    );
    let t = store.create_task(task(b.id, "t")).await.unwrap();
    assert_eq!(t.column_id, Some(columns[0].id));
    let t = store
        .change_state(t.id, change(TaskState::InProgress, "alice", None))
        .await
        .unwrap();
    assert_eq!((t.column_id, t.queued), (Some(columns[1].id), false));
}

pub(crate) async fn a_three_step_workflow_moves_a_card_and_a_wip_limit_queues(storage: &Storage) {
    let store = &storage.tasks;
    let b = store.create_board(board("alice")).await.unwrap();
    let cols = store.put_columns(b.id, three_steps(b.id)).await.unwrap();
    let (backlog, plan, implement, review) = (&cols[0], &cols[1], &cols[2], &cols[3]);
    assert_eq!(plan.wip_limit, Some(1));
    assert!(implement.new_session && !plan.new_session, "kept as given");
    let listed = store.list_columns(b.id).await.unwrap();
    assert_eq!(listed, cols, "read back as stored");
    let first = store.create_task(task(b.id, "first")).await.unwrap();
    let second = store.create_task(task(b.id, "second")).await.unwrap();
    assert_eq!(first.column_id, Some(backlog.id), "created in the backlog");

    // Entering Plan starts its run: TODO, its agent, autostart, the prompt.
    let a = store
        .move_task(first.id, plan.id, None, "alice".into())
        .await
        .unwrap();
    assert_eq!(
        (a.state, a.column_id, a.queued),
        (TaskState::Todo, Some(plan.id), false)
    );
    assert_eq!(
        (a.agent_type.as_deref(), a.autostart),
        (Some("mock-agent"), true)
    );
    assert_eq!(prompt(&a), Some("plan first: the details"));
    assert!(!new_session(&a), "Plan continues the task's session");
    assert_eq!(column_profile(&a), Some(PLAN_PROFILE));
    // The second waits in Plan's queue: not started.
    let q = store
        .move_task(second.id, plan.id, None, "alice".into())
        .await
        .unwrap();
    assert_eq!(
        (q.column_id, q.queued, q.autostart),
        (Some(plan.id), true, false)
    );
    assert_eq!(prompt(&q), None);

    // The orchestrator runs it; it stays in Plan while it runs.
    let a = store
        .change_state(a.id, change(TaskState::InProgress, "orchestrator", None))
        .await
        .unwrap();
    assert_eq!(a.column_id, Some(plan.id));
    // It finishes: on to Implement, whose run starts with the summary.
    let done = json!({"summary": "the plan"});
    let a = store
        .change_state(
            a.id,
            change(TaskState::Completed, "orchestrator", Some(done)),
        )
        .await
        .unwrap();
    assert_eq!(
        (a.state, a.column_id, a.autostart),
        (TaskState::Todo, Some(implement.id), true)
    );
    assert_eq!(prompt(&a), Some("implement first following: the plan"));
    assert!(new_session(&a), "Implement's run starts a new session");
    assert_eq!(
        column_profile(&a),
        None,
        "Implement has no profile of its own"
    );
    // Its slot in Plan freed: the second card entered and starts.
    let q = store.get_task(second.id).await.unwrap();
    assert_eq!(
        (q.column_id, q.queued, q.autostart),
        (Some(plan.id), false, true)
    );
    assert_eq!(prompt(&q), Some("plan second: the details"));

    // Implement finishes: Review, a column without automation.
    store
        .change_state(a.id, change(TaskState::InProgress, "orchestrator", None))
        .await
        .unwrap();
    let a = store
        .change_state(a.id, change(TaskState::Review, "orchestrator", None))
        .await
        .unwrap();
    assert_eq!((a.state, a.column_id), (TaskState::Review, Some(review.id)));
    assert_eq!(prompt(&a), None, "the prompt goes with the column");
    assert!(!new_session(&a), "so does the new session");
    // A failed run goes to the failure column.
    store
        .change_state(q.id, change(TaskState::InProgress, "orchestrator", None))
        .await
        .unwrap();
    let q = store
        .change_state(q.id, change(TaskState::Failed, "orchestrator", None))
        .await
        .unwrap();
    assert_eq!(
        (q.state, q.column_id),
        (TaskState::Failed, Some(cols[4].id))
    );

    // The events tell each move, with the workflow as the actor.
    let (events, _) = store
        .list_events(
            first.id,
            kandev_task_service::domain::Page {
                offset: 0,
                limit: 50,
            },
        )
        .await
        .unwrap();
    assert!(events.iter().any(|e| e.actor == "workflow"), "{events:?}");
}

pub(crate) async fn a_deleted_card_frees_its_slot_and_removed_columns_keep_their_cards(
    storage: &Storage,
) {
    let store = &storage.tasks;
    let b = store.create_board(board("alice")).await.unwrap();
    let cols = store.put_columns(b.id, three_steps(b.id)).await.unwrap();
    let plan = &cols[1];
    let one = store.create_task(task(b.id, "one")).await.unwrap();
    let two = store.create_task(task(b.id, "two")).await.unwrap();
    store
        .move_task(one.id, plan.id, None, "alice".into())
        .await
        .unwrap();
    let two = store
        .move_task(two.id, plan.id, None, "alice".into())
        .await
        .unwrap();
    assert!(two.queued);
    store
        .delete_task(one.id, None, "alice".into())
        .await
        .unwrap();
    let two = store.get_task(two.id).await.unwrap();
    assert!(!two.queued && two.autostart, "the queue moved up");

    // Back to the default workflow: the card goes to its state's column.
    let defaults: Vec<ColumnInput> = TaskState::ALL
        .iter()
        .map(|s| ColumnInput {
            name: s.label().into(),
            state: s.as_str().into(),
            ..Default::default()
        })
        .collect();
    let cols = store
        .put_columns(b.id, parse_columns(b.id, defaults).unwrap())
        .await
        .unwrap();
    assert_eq!(cols.len(), 8);
    let two = store.get_task(two.id).await.unwrap();
    assert_eq!(two.column_id, Some(cols[0].id), "TODO's column");
}

pub(crate) async fn bad_moves_and_columns_are_refused(storage: &Storage) {
    let store = &storage.tasks;
    let mine = store.create_board(board("alice")).await.unwrap();
    let theirs = store.create_board(board("bob")).await.unwrap();
    let t = store.create_task(task(mine.id, "t")).await.unwrap();
    let unknown = Uuid::now_v7();
    let err = store.move_task(t.id, unknown, None, "alice".into()).await;
    assert!(matches!(err, Err(TaskError::NotFound(m)) if m.contains("column")));
    let other = store.list_columns(theirs.id).await.unwrap();
    let err = store
        .move_task(t.id, other[0].id, None, "alice".into())
        .await;
    assert!(
        matches!(err, Err(TaskError::NotFound(_))),
        "another board's column"
    );
    // Another board's column id is not taken over.
    let mut stolen = three_steps(mine.id);
    stolen[0].id = other[0].id;
    let err = store.put_columns(mine.id, stolen).await;
    assert!(matches!(err, Err(TaskError::InvalidArgument(m)) if m.contains("another board")));
    assert_eq!(store.list_columns(theirs.id).await.unwrap(), other);
    // A move the transitions forbid is refused: TODO → COMPLETED.
    let done = store.list_columns(mine.id).await.unwrap()[5].clone();
    assert_eq!(done.state, TaskState::Completed);
    let err = store.move_task(t.id, done.id, None, "alice".into()).await;
    assert!(matches!(err, Err(TaskError::ForbiddenTransition { .. })));
}
