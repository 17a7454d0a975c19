//! Issue 40: follow-ups sent while a run is busy with a turn are held by
//! the orchestrator (listed, edited, cancelled), then go to the agent
//! together when the turn ends; a run that fails keeps them for the next
//! one; the store keeps them alike on Postgres and SQLite. Also: under
//! review, a run of a task with neither repository nor workspace completes.

use kandev_events::agent::AgentEventKind;
use kandev_orchestrator::engine::{
    followups::MAX_HELD_PROMPTS,
    store::{FollowUpStore, PgExecStore, SqliteExecStore},
};
use kandev_proto::v1::{self as pb, orchestrator_client::OrchestratorClient};
use uuid::Uuid;

use crate::databases::Scratch;
use crate::helpers::*;
use crate::task_steps::*;

/// A task of alice's that starts at once (in `workspace`, when not empty).
async fn task(app: &TestApp, board: &str, title: &str, workspace: &str) -> String {
    let task = pb::CreateTaskRequest {
        description: "scenario: slow 30 100".into(),
        workspace_path: workspace.into(),
        max_retries: Some(0),
        ..alices_task(board, title)
    };
    file_task(app, task).await
}

fn prompts(app: &TestApp) -> Vec<AgentCall> {
    app.agents
        .calls()
        .into_iter()
        .filter(|c| matches!(c, AgentCall::Prompt(..)))
        .collect()
}

fn client(app: &TestApp) -> OrchestratorClient<kandev_common::trace::TracedChannel> {
    OrchestratorClient::new(service_channel(app.addr))
}

async fn follow_up(app: &TestApp, id: &str, text: &str, actor: &str) -> Result<(), tonic::Status> {
    client(app)
        .start_task(pb::StartTaskRequest {
            task_id: id.into(),
            prompt: text.into(),
            actor: actor.into(),
        })
        .await
        .map(|_| ())
}

async fn held(app: &TestApp, id: &str) -> Vec<pb::PendingPrompt> {
    client(app)
        .list_pending_prompts(pb::ListPendingPromptsRequest { task_id: id.into() })
        .await
        .unwrap()
        .into_inner()
        .prompts
}

async fn edit(
    app: &TestApp,
    id: &str,
    prompt: &str,
    text: &str,
    actor: &str,
) -> Result<pb::PendingPrompt, tonic::Status> {
    client(app)
        .edit_pending_prompt(pb::EditPendingPromptRequest {
            task_id: id.into(),
            prompt_id: prompt.into(),
            text: text.into(),
            actor: actor.into(),
        })
        .await
        .map(|r| r.into_inner())
}

async fn cancel(app: &TestApp, id: &str, prompt: &str, actor: &str) -> Result<(), tonic::Status> {
    client(app)
        .cancel_pending_prompt(pb::CancelPendingPromptRequest {
            task_id: id.into(),
            prompt_id: prompt.into(),
            actor: actor.into(),
        })
        .await
        .map(|_| ())
}

#[tokio::test]
async fn follow_ups_sent_during_a_turn_wait_for_its_end_and_go_together() {
    let app = spawn_with_tasks(|_| {}).await;
    let board = board(&app).await;
    let id = task(&app, &board, "busy", "/tmp/kandev-test-ws").await;
    let first = wait_launches(&app, 1).await[0].1;
    wait_state(&app, &id, pb::TaskState::InProgress).await;

    // Held, not sent: the agent is busy.
    follow_up(&app, &id, "first follow-up", "alice")
        .await
        .unwrap();
    follow_up(&app, &id, "second follow-up", "alice")
        .await
        .unwrap();
    assert_eq!(prompts(&app), [], "nothing goes while the turn runs");
    let list = held(&app, &id).await;
    let texts: Vec<_> = list.iter().map(|p| p.text.as_str()).collect();
    assert_eq!(texts, ["first follow-up", "second follow-up"]);
    assert!(
        list.iter()
            .all(|p| p.author == "alice" && p.queued_at.is_some())
    );

    // Only the run's user sends, edits or cancels them.
    let theirs = follow_up(&app, &id, "print env", "bob").await.unwrap_err();
    assert_eq!(theirs.code(), tonic::Code::FailedPrecondition);
    let theirs = edit(&app, &id, &list[0].id, "x", "bob").await.unwrap_err();
    assert_eq!(theirs.code(), tonic::Code::FailedPrecondition, "{theirs:?}");
    let theirs = cancel(&app, &id, &list[0].id, "bob").await.unwrap_err();
    assert_eq!(theirs.code(), tonic::Code::FailedPrecondition, "{theirs:?}");
    let blank = edit(&app, &id, &list[0].id, "  ", "alice")
        .await
        .unwrap_err();
    assert_eq!(blank.code(), tonic::Code::InvalidArgument, "{blank:?}");

    // Edited, one cancelled, one more queued.
    let edited = edit(&app, &id, &list[0].id, "first, edited", "alice")
        .await
        .unwrap();
    assert_eq!(
        (edited.id.as_str(), edited.text.as_str()),
        (list[0].id.as_str(), "first, edited")
    );
    cancel(&app, &id, &list[1].id, "alice").await.unwrap();
    let gone = cancel(&app, &id, &list[1].id, "alice").await.unwrap_err();
    assert_eq!(gone.code(), tonic::Code::NotFound);
    let bad = cancel(&app, &id, "not-a-uuid", "alice").await.unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    follow_up(&app, &id, "third follow-up", "alice")
        .await
        .unwrap();

    // The turn ends: they go together, in order, to the same instance, and
    // the task stays in progress.
    let mut done = lifecycle(AgentEventKind::Completed, &id, first);
    done.acp_session_id = Some("sess_busy".into());
    done.summary = Some("turn one".into());
    publish_agent(&app.bus, done, 1).await;
    eventually(15, "the held follow-ups sent", || async {
        (!prompts(&app).is_empty()).then_some(())
    })
    .await;
    assert_eq!(
        prompts(&app),
        [AgentCall::Prompt(
            first,
            "first, edited\n\nthird follow-up".into()
        )]
    );
    assert!(held(&app, &id).await.is_empty());
    assert_eq!(
        get_task(&app, &id).await.state,
        pb::TaskState::InProgress as i32
    );
    let exec = client(&app)
        .get_task_execution(pb::GetTaskExecutionRequest {
            task_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(exec.state, pb::ExecutionState::Running as i32);

    // That turn ends with nothing held: the task completes.
    publish_agent(
        &app.bus,
        lifecycle(AgentEventKind::Completed, &id, first),
        2,
    )
    .await;
    wait_state(&app, &id, pb::TaskState::Completed).await;
    assert_eq!(prompts(&app).len(), 1);
    app.stop().await;
}

#[tokio::test]
async fn held_follow_ups_are_bounded_and_a_failed_run_keeps_them_for_the_next() {
    let app = spawn_with_tasks(|_| {}).await;
    let board = board(&app).await;
    let id = task(&app, &board, "bounded", "/tmp/kandev-test-ws").await;
    let first = wait_launches(&app, 1).await[0].1;
    wait_state(&app, &id, pb::TaskState::InProgress).await;
    for n in 0..MAX_HELD_PROMPTS {
        follow_up(&app, &id, &format!("echo {n}"), "alice")
            .await
            .unwrap();
    }
    let full = follow_up(&app, &id, "one too many", "alice")
        .await
        .unwrap_err();
    assert_eq!(full.code(), tonic::Code::ResourceExhausted);
    assert!(
        full.message().contains(&format!(
            "already has {MAX_HELD_PROMPTS} follow-ups waiting"
        )),
        "{full:?}"
    );
    assert_eq!(
        held(&app, &id).await.len(),
        MAX_HELD_PROMPTS,
        "nothing lost"
    );

    // The run fails for good: they stay held, and go first in the next
    // run its user starts.
    let mut failed = lifecycle(AgentEventKind::Failed, &id, first);
    failed.error = Some("the agent crashed".into());
    failed.retryable = Some(false);
    publish_agent(&app.bus, failed, 1).await;
    wait_state(&app, &id, pb::TaskState::Failed).await;
    assert_eq!(held(&app, &id).await.len(), MAX_HELD_PROMPTS);
    client(&app)
        .start_task(pb::StartTaskRequest {
            task_id: id.clone(),
            prompt: String::new(),
            actor: "alice".into(),
        })
        .await
        .unwrap();
    let second = &wait_launches(&app, 2).await[1].2;
    let expected: Vec<String> = (0..MAX_HELD_PROMPTS).map(|n| format!("echo {n}")).collect();
    assert_eq!(second.prompt, expected.join("\n\n"));
    assert!(held(&app, &id).await.is_empty());
    assert_eq!(prompts(&app), []);
    app.stop().await;
}

#[tokio::test]
async fn under_review_a_run_with_nothing_to_review_completes() {
    let app = spawn_with_tasks(|s| s.complete_to_review = true).await;
    let board = board(&app).await;
    let bare = task(&app, &board, "a question", "").await;
    let files = task(&app, &board, "an edit", "/tmp/kandev-test-ws").await;
    let launches = wait_launches(&app, 2).await;
    for (task_id, instance, _) in &launches {
        publish_agent(
            &app.bus,
            lifecycle(AgentEventKind::Completed, task_id, *instance),
            1,
        )
        .await;
    }
    wait_state(&app, &bare, pb::TaskState::Completed).await;
    wait_state(&app, &files, pb::TaskState::Review).await;
    app.stop().await;
}

/// The held follow-ups' store, on one database: in order, edited, dropped
/// one by one and all at once, per task.
async fn store_keeps_held_follow_ups(store: &dyn FollowUpStore) {
    let (task, other) = (Uuid::new_v4(), Uuid::new_v4());
    let a = store.hold_prompt(task, "alice", "first").await.unwrap();
    let b = store.hold_prompt(task, "alice", "second").await.unwrap();
    store.hold_prompt(other, "bob", "elsewhere").await.unwrap();
    let texts = |held: Vec<kandev_orchestrator::engine::store::PendingPrompt>| {
        held.into_iter().map(|p| p.text).collect::<Vec<_>>()
    };
    assert_eq!(
        texts(store.pending_prompts(task).await.unwrap()),
        ["first", "second"]
    );
    let edited = store
        .edit_pending_prompt(task, a.id, "first, edited")
        .await
        .unwrap();
    assert_eq!(
        edited.map(|p| (p.text, p.author)),
        Some(("first, edited".into(), "alice".into()))
    );
    assert_eq!(
        store.edit_pending_prompt(other, a.id, "x").await.unwrap(),
        None,
        "another task's"
    );
    assert!(store.drop_pending_prompt(task, b.id).await.unwrap());
    assert!(!store.drop_pending_prompt(task, b.id).await.unwrap());
    let kept = store.pending_prompts(task).await.unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!((kept[0].id, kept[0].text.as_str()), (a.id, "first, edited"));
    assert_eq!(
        kept[0].queued_at.timestamp_micros(),
        a.queued_at.timestamp_micros()
    );
    store.drop_pending_prompts(task).await.unwrap();
    assert!(store.pending_prompts(task).await.unwrap().is_empty());
    assert_eq!(
        texts(store.pending_prompts(other).await.unwrap()),
        ["elsewhere"]
    );
}

#[tokio::test]
async fn the_held_follow_ups_store_works_on_postgres_and_sqlite() {
    let (pool, scratch) = Scratch::postgres().await;
    store_keeps_held_follow_ups(&PgExecStore::new(pool)).await;
    scratch.remove().await;

    let (pool, scratch) = Scratch::sqlite().await;
    store_keeps_held_follow_ups(&SqliteExecStore::new(pool)).await;
    scratch.remove().await;
}
