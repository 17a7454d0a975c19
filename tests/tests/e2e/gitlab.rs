//! Issue 42 on GitLab, against a fake GitLab the test starts: a board
//! linked to a GitLab project gets a task of its labelled issue; the
//! task's approval opens a merge request whose description closes the
//! issue, and the issue gets a note with its link; an `Issue Hook` with a
//! wrong or missing `X-Gitlab-Token` is refused and changes nothing; the
//! pushed commit's red pipeline shows as failed checks on the task, and
//! "Fix CI" sends the failed job's name and the end of its trace to the
//! agent.

use kandev_e2e::{
    Api, Options, Stack, Svc,
    serde_json::{Value, json},
    trackers::{Tracked, tasks},
};
use kandev_testkit::fake_gitlab::{FakeGitlab, issue, issue_hook};

const SECRET: &str = "gl-whsec-e2e-8c3d";
const TOKEN: &str = "glpat-e2e-token";
const TRACE_TAIL: &str = "Failure: login_spec.rb:12 expected 200, got 500";

/// Posts an `Issue Hook` to the gateway with `token` (none when empty).
async fn deliver(stack: &Stack, payload: &Value, token: &str) -> kandev_e2e::Resp {
    let mut headers = vec![
        ("x-gitlab-event", "Issue Hook"),
        ("content-type", "application/json"),
    ];
    if !token.is_empty() {
        headers.push(("x-gitlab-token", token));
    }
    stack
        .anonymous()
        .try_send_with(
            "POST",
            "/api/v1/trackers/gitlab/webhook",
            Some(payload.to_string()),
            &headers,
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gitlab_issue_becomes_a_task_whose_merge_request_closes_it_and_ci_is_read() {
    let gitlab = FakeGitlab::start(TOKEN).await;
    let options = Options::default().with(Svc::Orchestrator, "KANDEV_CHECKS_POLL_MS", "200");
    let tracked = Tracked::start("gitlab", gitlab, options, SECRET).await;
    let Tracked {
        stack,
        api,
        board,
        url,
        repo: project,
        ..
    } = &tracked;
    assert_eq!(tracked.linked["kind"], "gitlab");
    let github = api
        .link_tracker(board, json!({"kind": "github", "repository_url": url}))
        .await;
    assert_eq!(github.status, 400, "{}", github.body);

    let task = tracked.labelled_task_in_review().await;
    let task_id = task["id"].as_str().unwrap().to_string();

    // A wrong token, or none: 401, and nothing changes.
    let forged = issue_hook(
        project,
        &issue(project, 3, "Forged", "scenario: code", &["kandev"]),
        "open",
    );
    for token in ["not-the-secret", ""] {
        let refused = deliver(stack, &forged, token).await;
        assert_eq!(refused.status, 401, "{token:?}: {}", refused.body);
    }
    assert_eq!(tasks(api, board).await.len(), 1);

    // The approval opens a merge request that closes the issue; the issue
    // gets a note with its link.
    let delivery = tracked.approve_closes_the_issue(&task_id).await;
    let mr_url = delivery["pull_request_url"].as_str().unwrap();
    assert!(mr_url.contains("/-/merge_requests/1"), "{mr_url}");
    let commit = delivery["commit"].as_str().unwrap();

    red_pipeline_is_read_and_fixed(api, &tracked.forge, project, &task_id, commit).await;

    tracked.assert_not_logged(&[SECRET, TOKEN]);
    tracked.stack.stop().await;
}

/// The pushed commit's pipeline fails: its jobs show as checks on the
/// task, and Fix CI sends the failed job's name and trace to the agent.
async fn red_pipeline_is_read_and_fixed(
    api: &Api,
    gitlab: &FakeGitlab,
    project: &str,
    task: &str,
    commit: &str,
) {
    let trace = format!("{}{TRACE_TAIL}\n", "bundle exec rspec…\n".repeat(1000));
    gitlab.pipeline(
        project,
        41,
        commit,
        &[
            (411, "build", "success", ""),
            (412, "rspec", "failed", &trace),
        ],
    );
    let checks = api.wait_checks(task, "failure").await;
    assert_eq!(checks["sha"], commit, "{checks}");
    let rspec = kandev_e2e::check_named(&checks, "rspec");
    assert_eq!(rspec["failed"], true, "{rspec}");
    assert_eq!(rspec["kind"], "job", "{rspec}");
    assert!(
        rspec["log_tail"].as_str().unwrap().contains(TRACE_TAIL),
        "{rspec}"
    );
    assert!(!checks.to_string().contains(TOKEN));
    // The card's task says so too (recorded just after the checks).
    api.wait_card_checks(task, json!({"state": "failure", "sha": commit}))
        .await;

    let fixed = api.fix_ci(task).await;
    assert_eq!(fixed.status, 200, "{}", fixed.body);
    assert_eq!(fixed.body["checks"], json!(["rspec"]), "{}", fixed.body);
    api.wait_prompt(task, 120, &["- rspec (failure)", TRACE_TAIL])
        .await;
}
