//! A tracker link that names one of the linking user's secrets reads the
//! forge with that secret's value instead of the `KANDEV_FORGES` token
//! (issue 42): the orchestrator opens it through the agent manager, only
//! ever the linking user's; a name the user has no secret of is refused on
//! save, even when another user has one; the value is never returned.

use kandev_e2e::{
    Options, Stack, Svc,
    serde_json::json,
    trackers::{Forge, task_of_issue},
};
use kandev_testkit::fake_github::{FakeGithub, issue};

const ALICE_TOKEN: &str = "ghp-admins-own-4b1d";
const BOB_TOKEN: &str = "ghp-bobs-own-77e0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_reads_the_forge_with_its_users_secret() {
    let forge = FakeGithub::start().await;
    let options = Options::default()
        .with(Svc::Orchestrator, "KANDEV_FORGES", forge.forges())
        .with(Svc::Orchestrator, "KANDEV_TRACKER_RECONCILE_SECS", "1");
    let stack = Stack::start("tracker_tokens", options).await;
    let admin = stack.admin().await;
    let bob = stack.user(&admin, "bob", "correct horse battery").await;
    bob.set_secret("GITHUB_TOKEN", BOB_TOKEN).await;

    let repo_url = stack.git_repo("tokened");
    let repo = repo_url.trim_start_matches("file:///").to_string();
    forge.serve(
        &repo,
        vec![issue(&repo, 1, "Use my token", "scenario: code", &[])],
    );
    let board = admin.board("tokened").await;
    let link = |secret: &str| {
        json!({"kind": "github", "repository_url": repo_url, "agent_type": "mock-agent",
               "token_secret": secret})
    };

    // The admin has no GITHUB_TOKEN: refused plainly, though bob has one.
    let refused = admin.link_tracker(&board, link("GITHUB_TOKEN")).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("GITHUB_TOKEN"),
        "{}",
        refused.body
    );
    assert!(!refused.body.to_string().contains(BOB_TOKEN));
    assert_eq!(admin.tracker(&board).await.status, 404);

    // With the admin's own secret: the link names it, never shows it.
    admin.set_secret("GITHUB_TOKEN", ALICE_TOKEN).await;
    let linked = admin.link_tracker(&board, link("GITHUB_TOKEN")).await;
    assert_eq!(linked.status, 200, "{}", linked.body);
    assert_eq!(
        linked.body["token_secret"], "GITHUB_TOKEN",
        "{}",
        linked.body
    );
    assert!(!linked.body.to_string().contains(ALICE_TOKEN));

    // The reconcile reads the issues with the admin's token: the issue
    // becomes a task; neither the forge's token nor bob's was sent.
    task_of_issue(&admin, &board, 1).await;
    {
        let state = forge.state.lock().unwrap();
        let listing = format!("/repos/{repo}/issues");
        let reads: Vec<&String> = state
            .asked
            .iter()
            .filter(|(method, path, _)| method == "GET" && *path == listing)
            .map(|(_, _, auth)| auth)
            .collect();
        assert!(!reads.is_empty());
        assert!(
            reads.iter().all(|a| *a == &format!("Bearer {ALICE_TOKEN}")),
            "{reads:?}"
        );
    }
    let shown = admin.tracker(&board).await;
    assert_eq!(shown.body["last_error"], "", "{}", shown.body);
    assert!(!shown.body.to_string().contains(ALICE_TOKEN));
    // Neither token reached a service's log.
    for svc in Svc::ALL {
        let log = stack.log(svc);
        for secret in [ALICE_TOKEN, BOB_TOKEN] {
            assert!(!log.contains(secret), "{svc:?} logged {secret}");
        }
    }
    stack.stop().await;
}
