//! Issue 42: a board linked to a GitHub repository (a fake GitHub here)
//! gets a task per labelled issue, by the reconcile and by signed webhook
//! deliveries, never two for one issue; an edited issue updates its task,
//! a closed one cancels its task that has not started; a delivery with a
//! bad signature is refused and changes nothing; a deleted or renamed
//! repository is a plain error on the link.

use kandev_common::webhook::sign;
use kandev_orchestrator::forge::{Forge, ForgeKind};
use kandev_proto::v1::{self as pb, orchestrator_client::OrchestratorClient};
use kandev_testkit::{
    eventually,
    fake_github::{FakeGithub, issue, issue_event},
};
use serde_json::{Value, json};

use crate::helpers::*;
use crate::task_steps::*;

const SECRET: &str = "whsec-orch-9d2e";

async fn app_with(forge: &FakeGithub) -> TestApp {
    app_with_forge(Forge {
        repository_prefix: "https://github.com/".into(),
        kind: ForgeKind::Github,
        api_url: forge.url.clone(),
        token: "t0ken".into(),
    })
    .await
}

/// The orchestrator with the task service, its one forge `forge`, its
/// links reconciled every second.
pub(crate) async fn app_with_forge(forge: Forge) -> TestApp {
    spawn_with_tasks(move |s| {
        s.forges = vec![forge];
        s.tracker_reconcile_secs = 1;
    })
    .await
}

pub(crate) fn orchestrator(
    app: &TestApp,
) -> OrchestratorClient<kandev_common::trace::TracedChannel> {
    OrchestratorClient::new(service_channel(app.addr))
}

/// The board's link once it records an error.
pub(crate) async fn link_error(app: &TestApp, board: &str) -> pb::TrackerLink {
    eventually(30, "the link's error", || async {
        let link = orchestrator(app)
            .get_tracker_link(pb::GetTrackerLinkRequest {
                board_id: board.into(),
            })
            .await
            .unwrap()
            .into_inner();
        (!link.last_error.is_empty()).then_some(link)
    })
    .await
}

async fn link(app: &TestApp, board: &str, repo: &str, secret: &str) -> pb::TrackerLink {
    orchestrator(app)
        .set_tracker_link(pb::SetTrackerLinkRequest {
            board_id: board.into(),
            kind: "github".into(),
            repository_url: format!("https://github.com/{repo}.git"),
            label: "kandev".into(),
            webhook_secret: secret.into(),
            created_by: "alice".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

pub(crate) async fn tasks(app: &TestApp, board: &str) -> Vec<pb::Task> {
    app.tasks()
        .list_tasks(pb::ListTasksRequest {
            board_id: board.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tasks
}

fn issue_number(task: &pb::Task) -> Value {
    let metadata: Value = serde_json::from_str(&task.metadata_json).unwrap();
    metadata["tracker"]["issue"].clone()
}

async fn deliver(
    app: &TestApp,
    event: &str,
    payload: &Value,
    secret: &str,
) -> Result<pb::TrackerWebhookResponse, tonic::Status> {
    let payload = payload.to_string().into_bytes();
    orchestrator(app)
        .deliver_tracker_webhook(pb::TrackerWebhookRequest {
            kind: "github".into(),
            event: event.into(),
            signature: sign(secret, &payload),
            payload,
        })
        .await
        .map(tonic::Response::into_inner)
}

#[tokio::test]
async fn labelled_issues_become_tasks_once_and_follow_their_issue() {
    let forge = FakeGithub::start().await;
    forge.serve(
        "acme/app",
        vec![
            issue("acme/app", 1, "First", "Do the first thing.", &["kandev"]),
            issue("acme/app", 2, "Not ours", "", &["bug"]),
        ],
    );
    let app = app_with(&forge).await;
    let board = board(&app).await;
    let linked = link(&app, &board, "acme/app", SECRET).await;
    assert_eq!(linked.repository, "acme/app");
    assert!(linked.has_webhook_secret);

    // The reconcile makes the labelled issue a task.
    let first = eventually(30, "the first issue's task", || {
        let app = &app;
        let board = board.clone();
        async move {
            tasks(app, &board)
                .await
                .into_iter()
                .find(|t| issue_number(t) == 1)
        }
    })
    .await;
    assert_eq!(first.title, "First");
    assert_eq!(
        first.description,
        "Do the first thing.\n\nFrom https://github.example/acme/app/issues/1"
    );
    assert_eq!(first.repository_url, "https://github.com/acme/app.git");
    assert_eq!(first.state, pb::TaskState::Todo as i32);

    // A bad signature (or another board's secret) is refused: no task.
    let opened = issue_event(
        "opened",
        "acme/app",
        issue("acme/app", 3, "Third", "", &["kandev"]),
    );
    let refused = deliver(&app, "issues", &opened, "wrong").await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    let mut garbled = opened.to_string().into_bytes();
    let signature = sign(SECRET, &garbled);
    garbled.push(b' ');
    let refused = orchestrator(&app)
        .deliver_tracker_webhook(pb::TrackerWebhookRequest {
            kind: "github".into(),
            event: "issues".into(),
            signature,
            payload: garbled,
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    assert_eq!(tasks(&app, &board).await.len(), 1);

    // Signed: the task is made, once however often it comes.
    let made = deliver(&app, "issues", &opened, SECRET).await.unwrap();
    assert_eq!(made.outcome, "created");
    let again = deliver(&app, "issues", &opened, SECRET).await.unwrap();
    assert_eq!(again.outcome, "ignored");
    assert_eq!(tasks(&app, &board).await.len(), 2);

    // Edited: the task follows; closed: the task, not started, is cancelled.
    let mut edited = issue(
        "acme/app",
        3,
        "Third, renamed",
        "Now with a body.",
        &["kandev"],
    );
    let updated = deliver(
        &app,
        "issues",
        &issue_event("edited", "acme/app", edited.clone()),
        SECRET,
    )
    .await
    .unwrap();
    assert_eq!(updated.outcome, "updated");
    assert_eq!(updated.task_id, made.task_id);
    edited["state"] = json!("closed");
    let cancelled = deliver(
        &app,
        "issues",
        &issue_event("closed", "acme/app", edited),
        SECRET,
    )
    .await
    .unwrap();
    assert_eq!(cancelled.outcome, "cancelled");
    let task = get_task(&app, &made.task_id).await;
    assert_eq!(task.title, "Third, renamed");
    assert_eq!(task.state, pb::TaskState::Cancelled as i32);

    // Other events, signed, are acknowledged and ignored.
    let ping = deliver(&app, "ping", &json!({"zen": "hi"}), SECRET)
        .await
        .unwrap();
    assert_eq!(ping.outcome, "ignored");
    app.stop().await;
}

#[tokio::test]
async fn a_deleted_or_renamed_repository_is_a_plain_error_on_the_link() {
    let forge = FakeGithub::start().await;
    forge
        .state
        .lock()
        .unwrap()
        .moved
        .insert("acme/old-name".into());
    let app = app_with(&forge).await;
    for (repo, words) in [
        (
            "acme/deleted",
            "the repository acme/deleted was not found on GitHub",
        ),
        (
            "acme/old-name",
            "the repository acme/old-name moved on GitHub",
        ),
    ] {
        let board = board(&app).await;
        link(&app, &board, repo, "").await;
        let got = link_error(&app, &board).await;
        assert!(got.last_error.starts_with(words), "{}", got.last_error);
        assert!(got.last_synced_at.is_some());
        assert!(!got.has_webhook_secret);
    }
    // A board that does not exist cannot be linked; an unknown link is
    // not found.
    let missing = orchestrator(&app)
        .set_tracker_link(pb::SetTrackerLinkRequest {
            board_id: uuid::Uuid::now_v7().to_string(),
            kind: "github".into(),
            repository_url: "https://github.com/acme/app".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    let unknown = orchestrator(&app)
        .delete_tracker_link(pb::DeleteTrackerLinkRequest {
            board_id: uuid::Uuid::now_v7().to_string(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
    app.stop().await;
}
