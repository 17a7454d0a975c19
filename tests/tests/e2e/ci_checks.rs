//! CI checks of a task's pushed work (issue 42), against a fake GitHub the
//! test starts: an approval opens a pull request and watches the pushed
//! commit; a red check run shows on the task (and its card's metadata);
//! "Fix CI" sends the failing checks' names and the end of their logs to
//! the agent as a follow-up in the same session, with the default settings:
//! the approval removed the task's clone, and the follow-up's turn runs in
//! a fresh clone of the pushed branch.

use kandev_e2e::{
    Options, Stack, Svc, check_named, is_prompt_with, merged, mock_task,
    serde_json::json,
    trackers::{Forge, GITHUB_TOKEN},
};
use kandev_testkit::fake_github::{BUILD_TAIL, FakeGithub, JOB_LOG_TAIL};

/// A red check shows on the task, and "Fix CI" sends the failure to the
/// agent in the same session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_red_check_shows_and_fix_ci_sends_it_to_the_agent() {
    let forge = FakeGithub::red(GITHUB_TOKEN).await;
    let options = Options::default()
        .with(Svc::Orchestrator, "KANDEV_FORGES", forge.forges())
        .with(Svc::Orchestrator, "KANDEV_CHECKS_POLL_MS", "200");
    let (stack, api, board) = Stack::start_with_board("ci_checks", options, "ci").await;
    let bare = stack.bare_repo("ci");
    forge.serve(&bare.repo, vec![]);
    let remote = bare.url;
    let fields = |title| {
        merged(
            mock_task(title, "scenario: code"),
            json!({"repository_url": remote}),
        )
    };
    let task = api.task(&board, fields("Fix the login")).await;
    api.wait_state(&task, &["COMPLETED"], 180).await;

    // Nothing pushed yet: no checks, nothing to fix; a bad id is a 400.
    let none = api.checks(&task).await;
    assert_eq!(none.status, 200, "{}", none.body);
    assert_eq!(none.body["state"], "none", "{}", none.body);
    assert_eq!(none.body["sha"], "", "{}", none.body);
    let nothing = api.fix_ci(&task).await;
    assert_eq!(nothing.status, 409, "{}", nothing.body);
    let bad = api
        .get("/api/v1/orchestrator/tasks/not-a-uuid/checks")
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let bad = api
        .post("/api/v1/orchestrator/tasks/not-a-uuid/fix-ci", json!({}))
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let unknown = api.checks(&uuid_like()).await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);

    // The approval pushes the branch and opens a pull request; the pushed
    // commit's checks are read: red.
    let delivery = api.approve(&task, Some("Fix the login")).await;
    let commit = delivery["commit"].as_str().unwrap().to_string();
    let branch = delivery["branch"].as_str().unwrap().to_string();
    // Delivered: the task's clone is gone (the default settings).
    assert!(!stack.workspace(&task).exists());
    let checks = api.wait_checks(&task, "failure").await;
    assert_eq!(checks["sha"], commit.as_str(), "{checks}");
    assert_eq!(checks["polling"], false, "{checks}");
    // Not sent by itself: the automation is off for this task.
    assert!(checks["fix_sent_at"].is_null(), "{checks}");
    let by_name = |name: &str| check_named(&checks, name);
    let build = by_name("build");
    assert_eq!(build["failed"], true, "{build}");
    assert_eq!(build["conclusion"], "failure", "{build}");
    assert_eq!(build["url"], "https://github.example/runs/11", "{build}");
    let tail = build["log_tail"].as_str().unwrap();
    assert!(tail.ends_with(BUILD_TAIL), "{tail}");
    assert!(tail.len() <= 4096, "{}", tail.len());
    let tests = by_name("unit-tests");
    assert!(
        tests["log_tail"].as_str().unwrap().contains(JOB_LOG_TAIL),
        "{tests}"
    );
    assert_eq!(by_name("lint")["failed"], false);
    assert_eq!(by_name("ci/docs")["kind"], "status");
    // The card's task says so too (recorded just after the checks).
    api.wait_card_checks(&task, json!({"state": "failure", "sha": commit}))
        .await;
    // The forge was asked with the token, which no answer shows.
    {
        let seen = forge.forge();
        let asked = &seen.asked;
        assert!(
            asked.iter().any(|(m, p, a)| m == "GET"
                && p.ends_with(&format!("/commits/{commit}/check-runs"))
                && a == "Bearer t0ken"),
            "{asked:?}"
        );
    }
    assert!(!checks.to_string().contains("t0ken"));

    // Fix CI: the failing checks' names and log tails go to the agent.
    let fixed = api.fix_ci(&task).await;
    assert_eq!(fixed.status, 200, "{}", fixed.body);
    assert_eq!(
        fixed.body["checks"],
        json!(["build", "unit-tests"]),
        "{}",
        fixed.body
    );
    // The clone removed after the push is made again from the pushed
    // branch, and the turn resumes the session there and ends well.
    let end = kandev_e2e::eventually(120, "the Fix CI turn's end in the feed", || {
        let api = api.clone();
        let task = task.clone();
        async move {
            let frames = kandev_e2e::replay(&api, &task).await;
            let prompt = frames.iter().position(|f| {
                let failed = ["- build (failure)", "- unit-tests (failure)"];
                is_prompt_with(f, &[failed[0], failed[1], BUILD_TAIL, JOB_LOG_TAIL])
            })?;
            frames[prompt..]
                .iter()
                .find(|f| kandev_e2e::is_turn_end(f))
                .cloned()
        }
    })
    .await;
    assert_eq!(end["event"]["data"]["stop_reason"], "end_turn", "{end}");
    let workspace = stack.workspace(&task);
    let readme = std::fs::read_to_string(workspace.join("README.md")).unwrap();
    assert!(
        readme.contains("Edited by kandev-mock-agent (turn 1)."),
        "{readme}"
    );
    let head = std::fs::read_to_string(workspace.join(".git/HEAD")).unwrap();
    assert_eq!(head.trim(), format!("ref: refs/heads/{branch}"));
    let after = api.checks(&task).await;
    assert!(after.body["fix_sent_at"].is_string(), "{}", after.body);

    // A task that asks for it (`metadata.auto_fix_ci`): the failure goes
    // to its agent by itself, once.
    let auto = merged(
        fields("Fix it alone"),
        json!({"metadata": {"auto_fix_ci": true}}),
    );
    let auto = api.task(&board, auto).await;
    api.wait_state(&auto, &["COMPLETED"], 180).await;
    api.approve(&auto, Some("Fix it alone")).await;
    api.wait_prompt(&auto, 120, &["- unit-tests (failure)"])
        .await;
    let sent = api.checks(&auto).await;
    assert_eq!(sent.body["state"], "failure", "{}", sent.body);
    assert!(sent.body["fix_sent_at"].is_string(), "{}", sent.body);
    stack.stop().await;
}

/// A task id no task has.
fn uuid_like() -> String {
    "0190f3a2-0000-7000-8000-000000000000".into()
}
