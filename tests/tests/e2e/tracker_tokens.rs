//! A tracker link that names one of the linking user's secrets reads the
//! forge with that secret's value instead of the `KANDEV_FORGES` token
//! (issue 42): the orchestrator opens it through the agent manager, only
//! ever the linking user's; a name the user has no secret of is refused on
//! save, even when another user has one; the value is never returned.

use kandev_e2e::{Api, Options, Stack, Svc, serde_json::json};
use kandev_testkit::fake_github::{FakeGithub, issue};

const ALICE_TOKEN: &str = "ghp-admins-own-4b1d";
const BOB_TOKEN: &str = "ghp-bobs-own-77e0";

async fn set_secret(api: &Api, name: &str, value: &str) {
    let r = api
        .send(
            "PUT",
            &format!("/api/v1/users/me/secrets/{name}"),
            Some(json!({ "value": value }).to_string()),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_reads_the_forge_with_its_users_secret() {
    let forge = FakeGithub::start().await;
    let forges = format!(
        "[{{repository_prefix = \"file:///\", kind = \"github\", api_url = \"{}\", token = \"t0ken\"}}]",
        forge.url
    );
    let stack = Stack::start(
        "tracker_tokens",
        Options {
            env: vec![
                (Svc::Orchestrator, "KANDEV_FORGES".into(), forges),
                (
                    Svc::Orchestrator,
                    "KANDEV_TRACKER_RECONCILE_SECS".into(),
                    "1".into(),
                ),
            ],
            ..Options::default()
        },
    )
    .await;
    let admin = stack.admin().await;
    let made = admin
        .post(
            "/api/v1/users",
            json!({"username": "bob", "password": "correct horse battery"}),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let bob = stack.login("bob", "correct horse battery").await;
    set_secret(&bob, "GITHUB_TOKEN", BOB_TOKEN).await;

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
    let refused = admin
        .post(
            &format!("/api/v1/boards/{board}/tracker"),
            link("GITHUB_TOKEN"),
        )
        .await;
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
    assert_eq!(
        admin
            .get(&format!("/api/v1/boards/{board}/tracker"))
            .await
            .status,
        404
    );

    // With the admin's own secret: the link names it, never shows it.
    set_secret(&admin, "GITHUB_TOKEN", ALICE_TOKEN).await;
    let linked = admin
        .post(
            &format!("/api/v1/boards/{board}/tracker"),
            link("GITHUB_TOKEN"),
        )
        .await;
    assert_eq!(linked.status, 200, "{}", linked.body);
    assert_eq!(
        linked.body["token_secret"], "GITHUB_TOKEN",
        "{}",
        linked.body
    );
    assert!(!linked.body.to_string().contains(ALICE_TOKEN));

    // The reconcile reads the issues with the admin's token: the issue
    // becomes a task; neither the forge's token nor bob's was sent.
    kandev_e2e::eventually(60, "the issue's task", || {
        let admin = admin.clone();
        let board = board.clone();
        async move {
            let r = admin.get(&format!("/api/v1/boards/{board}/tasks")).await;
            r.body["tasks"]
                .as_array()
                .and_then(|ts| ts.iter().find(|t| t["metadata"]["tracker"]["issue"] == 1))
                .cloned()
        }
    })
    .await;
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
    let shown = admin.get(&format!("/api/v1/boards/{board}/tracker")).await;
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
