//! Review comments (issue 40): the comments of each "Request changes" are
//! kept, round by round, listed through `GET /tasks/{id}/review/comments`
//! and resolved (or opened again) through `PATCH
//! /tasks/{id}/review/comments/{comment_id}` by the board's owner or the
//! comment's author; through both deployments (four services on Postgres,
//! and the `kandev` binary on SQLite).

use kandev_e2e::{
    Api, Options, Stack, Svc, deployments, merged, mock_task,
    serde_json::{Value, json},
};

/// Alice's task in review, commented on by her and the admin; carol, who
/// cannot see it.
async fn review_comments_are_kept_and_resolved_on(test: &str, options: Options) {
    let options = options.with(Svc::Orchestrator, "KANDEV_COMPLETE_TO_REVIEW", "true");
    let stack = Stack::start(test, options).await;
    let admin = stack.admin().await;
    let alice = stack.user(&admin, "alice", "correct horse battery").await;
    let carol = stack.user(&admin, "carol", "correct horse battery").await;
    let board = alice.board("reviews").await;
    let repo = stack.git_repo("reviews");
    let fields = json!({"repository_url": repo});
    let task = alice
        .task(
            &board,
            merged(mock_task("Review me", "scenario: code"), fields),
        )
        .await;
    alice.wait_state(&task, &["REVIEW"], 180).await;
    let path = format!("/api/v1/tasks/{task}/review/comments");
    assert_eq!(comments(&alice, &task).await, Vec::<Value>::new());

    bad_comments_are_refused(&alice, &task).await;
    let first = first_round(&alice, &task).await;
    alice.wait_state(&task, &["REVIEW"], 180).await;
    // The admin's round: kept after alice's, numbered 2.
    let asked = admin
        .review(
            &task,
            json!({"action": "request_changes",
                   "comments": [{"path": "README.md", "line": 5, "body": "And here."}]}),
        )
        .await;
    assert_eq!(asked.status, 200, "{}", asked.body);
    let kept = comments(&alice, &task).await;
    assert_eq!(kept.len(), 4, "{kept:?}");
    assert_eq!(&kept[..3], &first[..], "round 1 as it was");
    assert_eq!(
        (&kept[3]["round"], &kept[3]["author"], &kept[3]["line"]),
        (&json!(2), &json!("admin"), &json!(5))
    );

    // Carol sees nothing of the task; a bad id or body is refused.
    let id = |c: &Value| c["id"].as_str().unwrap().to_string();
    let (alices, admins) = (id(&kept[1]), id(&kept[3]));
    let hidden = carol.get(&path).await;
    assert_error(&hidden, 404, "not_found");
    let hidden = carol
        .patch(&format!("{path}/{alices}"), json!({"resolved": true}))
        .await;
    assert_error(&hidden, 404, "not_found");
    resolving_is_checked(&admin, &path, &alices).await;

    // The admin may resolve their own comment, not alice's on her board.
    let refused = admin
        .patch(&format!("{path}/{alices}"), json!({"resolved": true}))
        .await;
    assert_error(&refused, 403, "forbidden");
    let own = admin
        .patch(&format!("{path}/{admins}"), json!({"resolved": true}))
        .await;
    assert_eq!(own.status, 200, "{}", own.body);
    assert_eq!(
        (&own.body["resolved"], &own.body["resolved_by"]),
        (&json!(true), &json!("admin"))
    );
    assert!(own.body["resolved_at"].is_string(), "{}", own.body);
    board_owner_resolves_and_reopens(&alice, &path, &alices, &admins).await;
    stack.stop().await;
}

/// The task's kept comments, as `api` lists them.
async fn comments(api: &Api, task: &str) -> Vec<Value> {
    let r = api
        .get(&format!("/api/v1/tasks/{task}/review/comments"))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["comments"].as_array().expect("comments").clone()
}

/// An error answer of the gateway's one shape.
fn assert_error(r: &kandev_e2e::Resp, status: u16, code: &str) {
    assert_eq!(r.status, status, "{}", r.body);
    assert_eq!(r.body["error"], code, "{}", r.body);
    assert_eq!(r.body["http_status"], status, "{}", r.body);
    assert!(
        r.body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{}",
        r.body
    );
}

/// A comment on an unknown side, or with too long a line, keeps nothing.
async fn bad_comments_are_refused(api: &Api, task: &str) {
    for comment in [
        json!({"path": "README.md", "line": 4, "side": "left", "body": "x"}),
        json!({"path": "README.md", "line": 4, "line_text": "y".repeat(2001), "body": "x"}),
    ] {
        let r = api
            .review(
                task,
                json!({"action": "request_changes", "comments": [comment]}),
            )
            .await;
        assert_eq!(r.status, 400, "{}", r.body);
    }
    assert!(comments(api, task).await.is_empty());
}

/// Alice's request for changes: a message, a two-line comment on line 4
/// and one on the whole file; kept as round 1, the message first.
async fn first_round(alice: &Api, task: &str) -> Vec<Value> {
    let asked = alice
        .review(
            task,
            json!({"action": "request_changes", "message": "scenario: code",
                   "comments": [
                       {"path": "README.md", "line": 4, "side": "new",
                        "line_text": "Edited by kandev-mock-agent (turn 1).",
                        "body": "Say more here.\nIn two lines."},
                       {"path": "README.md", "body": "The whole file."},
                       {"path": "README.md", "line": 2, "body": "   "}]}),
        )
        .await;
    assert_eq!(asked.status, 200, "{}", asked.body);
    let kept = comments(alice, task).await;
    let said: Vec<Value> = kept
        .iter()
        .map(|c| {
            json!([
                c["round"],
                c["path"],
                c["line"],
                c["side"],
                c["line_text"],
                c["body"],
                c["author"],
                c["resolved"],
                c["resolved_by"]
            ])
        })
        .collect();
    assert_eq!(
        said,
        [
            json!([
                1,
                "",
                null,
                "new",
                "",
                "scenario: code",
                "alice",
                false,
                null
            ]),
            json!([
                1,
                "README.md",
                4,
                "new",
                "Edited by kandev-mock-agent (turn 1).",
                "Say more here.\nIn two lines.",
                "alice",
                false,
                null
            ]),
            json!([
                1,
                "README.md",
                null,
                "new",
                "",
                "The whole file.",
                "alice",
                false,
                null
            ]),
        ],
        "the message first, no blank comment"
    );
    for c in &kept {
        assert_eq!(c["task_id"], task);
        assert!(
            c["created_at"].is_string() && c["resolved_at"].is_null(),
            "{c}"
        );
    }
    kept
}

/// Malformed ids and bodies are bad requests; an unknown comment is not
/// found.
async fn resolving_is_checked(api: &Api, path: &str, comment: &str) {
    let bad_id = api
        .patch(&format!("{path}/not-a-uuid"), json!({"resolved": true}))
        .await;
    assert_error(&bad_id, 400, "bad_request");
    let unknown = api
        .patch(
            &format!("{path}/0190c8a4-5a1e-7000-8000-000000000000"),
            json!({"resolved": true}),
        )
        .await;
    assert_error(&unknown, 404, "not_found");
    for body in [
        json!({"resolved": "yes"}),
        json!({"resolved": true, "by": "me"}),
        json!({}),
    ] {
        let r = api.patch(&format!("{path}/{comment}"), body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.body);
    }
}

/// The board's owner resolves anyone's comment on it, and opens it again.
async fn board_owner_resolves_and_reopens(alice: &Api, path: &str, own: &str, admins: &str) {
    for id in [own, admins] {
        let r = alice
            .patch(&format!("{path}/{id}"), json!({"resolved": true}))
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["resolved"], true, "{}", r.body);
    }
    // Resolved twice: who resolved it first stays.
    let admins_after = alice.get(path).await.body["comments"][3].clone();
    assert_eq!(admins_after["resolved_by"], "admin", "{admins_after}");
    let reopened = alice
        .patch(&format!("{path}/{own}"), json!({"resolved": false}))
        .await;
    assert_eq!(reopened.status, 200, "{}", reopened.body);
    assert_eq!(
        (
            &reopened.body["resolved"],
            &reopened.body["resolved_by"],
            &reopened.body["resolved_at"]
        ),
        (&json!(false), &Value::Null, &Value::Null)
    );
    let listed = alice.get(path).await.body["comments"].clone();
    let states: Vec<&Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["resolved"])
        .collect();
    assert_eq!(
        states,
        [&json!(false), &json!(false), &json!(false), &json!(true)]
    );
}

deployments! {
    review_comments_are_kept_and_resolved_on("review_comments"),
    four: review_comments_are_kept_and_resolved,
    single: review_comments_are_kept_and_resolved_single,
}
