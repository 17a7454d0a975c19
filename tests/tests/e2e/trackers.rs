//! Boards linked to an issue tracker, against a fake GitHub: a labelled
//! issue becomes a task (by the reconcile, and by a signed webhook), the
//! task's approval opens a pull request that closes it and comments on it;
//! a closed issue cancels a task that has not started; a bad signature is
//! refused and changes nothing; a deleted or renamed repository is a plain
//! error on the link; the webhook secret is never returned or logged.

use kandev_common::webhook::sign;
use kandev_e2e::{
    Api, Options, Stack,
    serde_json::{Value, json},
    trackers::{Tracked, tasks},
};

use kandev_testkit::fake_github::{FakeGithub, issue, issue_event};

const SECRET: &str = "whsec-e2e-5f1c";

/// Posts a webhook delivery signed with `secret`.
async fn deliver(stack: &Stack, event: &str, payload: &Value, secret: &str) -> kandev_e2e::Resp {
    let body = payload.to_string();
    let signature = sign(secret, body.as_bytes());
    stack
        .anonymous()
        .try_send_with(
            "POST",
            "/api/v1/trackers/github/webhook",
            Some(body),
            &[
                ("x-github-event", event),
                ("x-hub-signature-256", &signature),
                ("content-type", "application/json"),
            ],
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labelled_issue_becomes_a_task_whose_pull_request_closes_it() {
    let forge = FakeGithub::start().await;
    let tracked = Tracked::start("trackers", forge, Options::default(), SECRET).await;
    let Tracked {
        stack,
        api,
        board,
        url,
        repo,
        ..
    } = &tracked;

    // Linked: the secret is stored, never shown.
    assert_eq!(tracked.linked["has_webhook_secret"], true);
    let bad = api
        .link_tracker(
            board,
            json!({"kind": "github", "repository_url": "https://elsewhere.example/a/b"}),
        )
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);

    // The reconcile made the labelled issue a task (and only it), which runs.
    let task = tracked.labelled_task_in_review().await;
    let task_id = task["id"].as_str().unwrap().to_string();
    assert!(
        task["description"]
            .as_str()
            .unwrap()
            .contains(&format!("https://github.example/{repo}/issues/1")),
        "{task}"
    );
    let got = api.tracker(board).await;
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(got.body["last_error"], "", "{}", got.body);
    assert!(!got.body.to_string().contains(SECRET));

    // A delivery with a bad signature, or none, is refused; nothing changes.
    let opened = issue_event(
        "opened",
        repo,
        issue(repo, 3, "Forged", "scenario: code", &["kandev"]),
    );
    let forged = deliver(stack, "issues", &opened, "not-the-secret").await;
    assert_eq!(forged.status, 401, "{}", forged.body);
    let unsigned = stack
        .anonymous()
        .try_send_with(
            "POST",
            "/api/v1/trackers/github/webhook",
            Some(opened.to_string()),
            &[("x-github-event", "issues")],
        )
        .await
        .unwrap();
    assert_eq!(unsigned.status, 401, "{}", unsigned.body);
    assert_eq!(tasks(api, board).await.len(), 1);

    // The approval opens a pull request that closes the issue, and the
    // issue is told.
    tracked.approve_closes_the_issue(&task_id).await;

    closing_an_issue_cancels_its_task_not_started(stack, api, url, repo).await;
    gone_repositories_are_a_plain_error(stack, api, &tracked.forge).await;

    tracked.assert_not_logged(&[SECRET]);
    tracked.stack.stop().await;
}

/// A second board on the same repository (its own label, no agent): a
/// signed delivery makes a task that waits, and closing the issue cancels
/// it.
async fn closing_an_issue_cancels_its_task_not_started(
    stack: &Stack,
    api: &Api,
    url: &str,
    repo: &str,
) {
    let board = api.board("intake").await;
    let linked = api
        .link_tracker(
            &board,
            json!({"kind": "github", "repository_url": url, "label": "later",
                   "webhook_secret": SECRET}),
        )
        .await;
    assert_eq!(linked.status, 200, "{}", linked.body);
    let later = issue(repo, 4, "Later", "Some day.", &["later"]);
    let made = deliver(
        stack,
        "issues",
        &issue_event("opened", repo, later.clone()),
        SECRET,
    )
    .await;
    assert_eq!(made.status, 200, "{}", made.body);
    assert_eq!(made.body["outcome"], "created", "{}", made.body);
    let task_id = made.body["task_id"].as_str().unwrap().to_string();
    // Delivered again (or reconciled): still one task.
    let again = deliver(
        stack,
        "issues",
        &issue_event("labeled", repo, later.clone()),
        SECRET,
    )
    .await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(tasks(api, &board).await.len(), 1);

    let mut closed = later;
    closed["state"] = json!("closed");
    let cancelled = deliver(
        stack,
        "issues",
        &issue_event("closed", repo, closed),
        SECRET,
    )
    .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    assert_eq!(cancelled.body["outcome"], "cancelled", "{}", cancelled.body);
    api.wait_state(&task_id, &["CANCELLED"], 10).await;

    let unlinked = api
        .send("DELETE", &format!("/api/v1/boards/{board}/tracker"), None)
        .await;
    assert_eq!(unlinked.status, 204, "{}", unlinked.body);
    let gone = api.tracker(&board).await;
    assert_eq!(gone.status, 404, "{}", gone.body);
}

/// A deleted and a renamed repository: a plain error on the link, and the
/// board still answers.
async fn gone_repositories_are_a_plain_error(stack: &Stack, api: &Api, forge: &FakeGithub) {
    let renamed = stack.bare_repo("renamed");
    forge.forge().moved.insert(renamed.repo);
    let (renamed_url, deleted_url) = (renamed.url, stack.bare_repo("deleted").url);
    for (url, words) in [
        (deleted_url, "was not found on GitHub"),
        (renamed_url, "moved on GitHub"),
    ] {
        let board = api.board("gone").await;
        let linked = api
            .link_tracker(&board, json!({"kind": "github", "repository_url": url}))
            .await;
        assert_eq!(linked.status, 200, "{}", linked.body);
        let link = kandev_e2e::eventually(30, "the link's error", || {
            let api = api.clone();
            let board = board.clone();
            async move {
                let r = api.tracker(&board).await;
                (r.status == 200 && r.body["last_error"] != "").then_some(r.body)
            }
        })
        .await;
        assert!(
            link["last_error"].as_str().unwrap().contains(words),
            "{link}"
        );
        assert_eq!(
            api.get(&format!("/api/v1/boards/{board}")).await.status,
            200
        );
    }
}
