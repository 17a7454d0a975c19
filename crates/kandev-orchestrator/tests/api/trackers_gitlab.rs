//! Issue 42 on GitLab: a board linked to a GitLab project (a fake GitLab
//! here) gets a task per labelled issue by the reconcile and by `Issue
//! Hook` deliveries whose `X-Gitlab-Token` is the link's secret; a wrong
//! or missing token is refused and changes nothing; a closed issue
//! cancels its task not started; a missing project is a plain error on
//! the link; a link's kind must match its forge's.

use kandev_orchestrator::forge::{Forge, ForgeKind};
use kandev_proto::v1 as pb;
use kandev_testkit::{
    eventually,
    fake_gitlab::{FakeGitlab, issue, issue_hook},
};
use serde_json::{Value, json};

use crate::{
    helpers::*,
    task_steps::{board_of, get_task},
    trackers::{app_with_forge, link_error, orchestrator, tasks},
};

const SECRET: &str = "gl-whsec-4b7a";
const PROJECT: &str = "group/sub/app";

async fn app_with(gitlab: &FakeGitlab) -> TestApp {
    app_with_forge(Forge {
        repository_prefix: "https://gitlab.example/".into(),
        kind: ForgeKind::Gitlab,
        api_url: gitlab.api_url(),
        token: gitlab.token.clone(),
    })
    .await
}

async fn linked_board(app: &TestApp, kind: &str, project: &str) -> Result<String, tonic::Status> {
    let board = board_of(app, "Tracked", "alice").await;
    orchestrator(app)
        .set_tracker_link(pb::SetTrackerLinkRequest {
            board_id: board.clone(),
            kind: kind.into(),
            repository_url: format!("https://gitlab.example/{project}.git"),
            label: "kandev".into(),
            webhook_secret: SECRET.into(),
            created_by: "alice".into(),
            ..Default::default()
        })
        .await?;
    Ok(board)
}

async fn deliver(
    app: &TestApp,
    event: &str,
    payload: &Value,
    token: &str,
) -> Result<pb::TrackerWebhookResponse, tonic::Status> {
    orchestrator(app)
        .deliver_tracker_webhook(pb::TrackerWebhookRequest {
            kind: "gitlab".into(),
            event: event.into(),
            signature: token.into(),
            payload: payload.to_string().into_bytes(),
        })
        .await
        .map(tonic::Response::into_inner)
}

#[tokio::test]
async fn labelled_gitlab_issues_become_tasks_and_follow_their_issue() {
    let gitlab = FakeGitlab::start("glpat-orch").await;
    gitlab.serve(
        PROJECT,
        vec![
            issue(PROJECT, 1, "First", "Do it.", &["kandev"]),
            issue(PROJECT, 2, "Not ours", "", &["bug"]),
        ],
    );
    let app = app_with(&gitlab).await;
    // A GitHub link on a GitLab forge is refused in plain words.
    let wrong = linked_board(&app, "github", PROJECT).await.unwrap_err();
    assert_eq!(wrong.code(), tonic::Code::InvalidArgument);
    assert!(wrong.message().contains("no GitHub forge"), "{wrong:?}");
    let board = linked_board(&app, "gitlab", PROJECT).await.unwrap();

    let first = eventually(30, "the first issue's task", || {
        let app = &app;
        let board = board.clone();
        async move { tasks(app, &board).await.into_iter().next() }
    })
    .await;
    assert_eq!(first.title, "First");
    assert_eq!(
        first.description,
        format!("Do it.\n\nFrom https://gitlab.example/{PROJECT}/-/issues/1")
    );
    let metadata: Value = serde_json::from_str(&first.metadata_json).unwrap();
    assert_eq!(metadata["tracker"]["kind"], "gitlab");
    {
        let asked = gitlab.state.lock().unwrap().asked.clone();
        assert!(
            asked.iter().any(
                |(_, p)| p.starts_with("/api/v4/projects/group%2Fsub%2Fapp/issues?")
                    && p.contains("labels=kandev")
            ),
            "{asked:?}"
        );
    }

    // A wrong token, none, or a GitHub-style signature: refused, no task.
    let third = issue(PROJECT, 3, "Third", "", &["kandev"]);
    let opened = issue_hook(PROJECT, &third, "open");
    for token in ["wrong", "", "sha256=00"] {
        let refused = deliver(&app, "Issue Hook", &opened, token)
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{token:?}");
    }
    assert_eq!(tasks(&app, &board).await.len(), 1);

    // The right token: made once; edited: followed; closed: cancelled.
    let made = deliver(&app, "Issue Hook", &opened, SECRET).await.unwrap();
    assert_eq!(made.outcome, "created");
    let again = deliver(&app, "Issue Hook", &opened, SECRET).await.unwrap();
    assert_eq!(again.outcome, "ignored");
    let mut edited = issue(PROJECT, 3, "Third, renamed", "Body.", &["kandev"]);
    let updated = deliver(
        &app,
        "Issue Hook",
        &issue_hook(PROJECT, &edited, "update"),
        SECRET,
    )
    .await
    .unwrap();
    assert_eq!(
        (updated.outcome.as_str(), &updated.task_id),
        ("updated", &made.task_id)
    );
    edited["state"] = json!("closed");
    let cancelled = deliver(
        &app,
        "Issue Hook",
        &issue_hook(PROJECT, &edited, "close"),
        SECRET,
    )
    .await
    .unwrap();
    assert_eq!(cancelled.outcome, "cancelled");
    let task = get_task(&app, &made.task_id).await;
    assert_eq!(task.state, pb::TaskState::Cancelled as i32);

    // Other events are acknowledged and ignored; a proven non-issue
    // payload under the issue event is a plain error.
    let push = json!({"object_kind": "push", "project": {"path_with_namespace": PROJECT}});
    let ignored = deliver(&app, "Push Hook", &push, SECRET).await.unwrap();
    assert_eq!(ignored.outcome, "ignored");
    let bad = deliver(&app, "Issue Hook", &push, SECRET)
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    app.stop().await;
}

#[tokio::test]
async fn a_missing_gitlab_project_is_a_plain_error_on_the_link() {
    let gitlab = FakeGitlab::start("glpat-orch").await;
    let app = app_with(&gitlab).await;
    let board = linked_board(&app, "gitlab", "group/deleted").await.unwrap();
    let got = link_error(&app, &board).await;
    assert!(
        got.last_error
            .starts_with("the repository group/deleted was not found on GitLab"),
        "{}",
        got.last_error
    );
    assert!(!got.last_error.contains("glpat"), "{}", got.last_error);
    app.stop().await;
}
