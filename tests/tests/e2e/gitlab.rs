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
};
use kandev_testkit::fake_gitlab::{FakeGitlab, issue, issue_hook};

use crate::trackers::tasks;

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
    let forges = format!(
        "[{{repository_prefix = \"file:///\", kind = \"gitlab\", api_url = \"{}\", token = \"{TOKEN}\"}}]",
        gitlab.api_url()
    );
    let stack = Stack::start(
        "gitlab",
        Options {
            env: vec![
                (
                    Svc::Orchestrator,
                    "KANDEV_COMPLETE_TO_REVIEW".into(),
                    "true".into(),
                ),
                (Svc::Orchestrator, "KANDEV_FORGES".into(), forges),
                (
                    Svc::Orchestrator,
                    "KANDEV_TRACKER_RECONCILE_SECS".into(),
                    "1".into(),
                ),
                (
                    Svc::Orchestrator,
                    "KANDEV_CHECKS_POLL_MS".into(),
                    "200".into(),
                ),
            ],
            ..Options::default()
        },
    )
    .await;
    let api = stack.admin().await;
    let bare = stack.bare_repo("gl-tracked");
    let (url, project) = (bare.url, bare.repo);
    gitlab.serve(
        &project,
        vec![
            issue(
                &project,
                1,
                "Improve the readme",
                "scenario: code",
                &["kandev"],
            ),
            issue(&project, 2, "Not for Kandev", "scenario: code", &["bug"]),
        ],
    );

    let board = api.board("gitlab").await;
    let linked = api
        .post(
            &format!("/api/v1/boards/{board}/tracker"),
            json!({"kind": "gitlab", "repository_url": url, "label": "kandev",
                   "agent_type": "mock-agent", "webhook_secret": SECRET}),
        )
        .await;
    assert_eq!(linked.status, 200, "{}", linked.body);
    assert_eq!(linked.body["kind"], "gitlab");
    assert_eq!(linked.body["repository"], project.as_str());
    assert!(!linked.body.to_string().contains(SECRET), "{}", linked.body);
    let github = api
        .post(
            &format!("/api/v1/boards/{board}/tracker"),
            json!({"kind": "github", "repository_url": url}),
        )
        .await;
    assert_eq!(github.status, 400, "{}", github.body);

    let task = kandev_e2e::eventually(60, "the issue's task", || {
        let api = api.clone();
        let board = board.clone();
        async move {
            tasks(&api, &board)
                .await
                .into_iter()
                .find(|t| t["metadata"]["tracker"]["issue"] == 1)
        }
    })
    .await;
    let task_id = task["id"].as_str().unwrap().to_string();
    assert_eq!(task["title"], "Improve the readme");
    api.wait_state(&task_id, &["REVIEW"], 180).await;
    assert_eq!(tasks(&api, &board).await.len(), 1);

    // A wrong token, or none: 401, and nothing changes.
    let forged = issue_hook(
        &project,
        &issue(&project, 3, "Forged", "scenario: code", &["kandev"]),
        "open",
    );
    for token in ["not-the-secret", ""] {
        let refused = deliver(&stack, &forged, token).await;
        assert_eq!(refused.status, 401, "{token:?}: {}", refused.body);
    }
    assert_eq!(tasks(&api, &board).await.len(), 1);

    // The approval opens a merge request that closes the issue; the issue
    // gets a note with its link.
    let approved = api
        .post(
            &format!("/api/v1/tasks/{task_id}/review"),
            json!({"action": "approve"}),
        )
        .await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    let mr_url = approved.body["delivery"]["pull_request_url"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(mr_url.contains("/-/merge_requests/1"), "{mr_url}");
    let commit = approved.body["delivery"]["commit"]
        .as_str()
        .unwrap()
        .to_string();
    {
        let seen = gitlab.state.lock().unwrap();
        assert_eq!(seen.merge_requests.len(), 1, "{:?}", seen.merge_requests);
        let description = seen.merge_requests[0].1["description"].as_str().unwrap();
        assert!(description.contains("Closes #1"), "{description}");
        assert_eq!(seen.notes.len(), 1, "{:?}", seen.notes);
        assert_eq!(
            (seen.notes[0].0.as_str(), seen.notes[0].1),
            (project.as_str(), 1)
        );
        assert!(seen.notes[0].2.contains(&mr_url), "{:?}", seen.notes);
    }

    red_pipeline_is_read_and_fixed(&api, &gitlab, &project, &task_id, &commit).await;

    for svc in [Svc::Gateway, Svc::Orchestrator] {
        let log = stack.log(svc);
        assert!(!log.contains(SECRET), "{svc:?} logged the secret");
        assert!(!log.contains(TOKEN), "{svc:?} logged the token");
    }
    stack.stop().await;
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
    let checks = kandev_e2e::eventually(60, "the red pipeline", || {
        let api = api.clone();
        let task = task.to_string();
        async move {
            let r = api
                .get(&format!("/api/v1/orchestrator/tasks/{task}/checks"))
                .await;
            (r.status == 200 && r.body["state"] == "failure").then_some(r.body)
        }
    })
    .await;
    assert_eq!(checks["sha"], commit, "{checks}");
    let rspec = checks["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "rspec")
        .cloned()
        .unwrap_or_else(|| panic!("no rspec in {checks}"));
    assert_eq!(rspec["failed"], true, "{rspec}");
    assert_eq!(rspec["kind"], "job", "{rspec}");
    assert!(
        rspec["log_tail"].as_str().unwrap().contains(TRACE_TAIL),
        "{rspec}"
    );
    assert!(!checks.to_string().contains(TOKEN));
    // The card's task says so too (recorded just after the checks).
    kandev_e2e::eventually(30, "the card's failed checks", || {
        let api = api.clone();
        let task = task.to_string();
        let want = json!({"state": "failure", "sha": commit});
        async move {
            let shown = api.get(&format!("/api/v1/tasks/{task}")).await;
            (shown.body["metadata"]["checks"] == want).then_some(())
        }
    })
    .await;

    let fixed = api
        .post(
            &format!("/api/v1/orchestrator/tasks/{task}/fix-ci"),
            json!({}),
        )
        .await;
    assert_eq!(fixed.status, 200, "{}", fixed.body);
    assert_eq!(fixed.body["checks"], json!(["rspec"]), "{}", fixed.body);
    kandev_e2e::eventually(120, "the Fix CI prompt in the feed", || {
        let api = api.clone();
        let task = task.to_string();
        async move {
            kandev_e2e::replay(&api, &task)
                .await
                .iter()
                .any(|f| {
                    let raw = f["event"]["raw"].to_string();
                    raw.contains("session/prompt")
                        && raw.contains("- rspec (failure)")
                        && raw.contains(TRACE_TAIL)
                })
                .then_some(())
        }
    })
    .await;
}
