//! Pull and merge requests against a local server that implements the few
//! GitHub and GitLab endpoints Kandev uses: the request's shape and auth
//! header, and each error status read as the right error.

use std::sync::{Arc, Mutex};

use axum::{Json, Router, extract::State, http::StatusCode};
use kandev_orchestrator::forge::{
    CallError, Forge, ForgeError, ForgeKind, PullRequest, PullRequestSpec, api, open_pull_request,
};
use serde_json::{Value, json};

/// What the fake forge was sent: (path, auth header, body).
type Seen = Arc<Mutex<Vec<(String, String, Value)>>>;

async fn fake_forge(
    State(seen): State<Seen>,
    uri: axum::http::Uri,
    headers: axum::http::HeaderMap,
    bytes: axum::body::Bytes,
) -> (StatusCode, Json<Value>) {
    let path = uri.path().to_string();
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let (github_auth, gitlab_auth) = (header("authorization"), header("private-token"));
    let accept = header("accept");
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if path == "/repos/acme/huge/pulls" {
        // More than a forge's answer may be: not read.
        let huge = "x".repeat(api::MAX_ANSWER + 1);
        return (StatusCode::CREATED, Json(json!({ "html_url": huge })));
    }
    if path == "/repos/acme/app/pulls" {
        seen.lock()
            .unwrap()
            .push((path, github_auth.clone(), body.clone()));
        if github_auth != "Bearer good" {
            return (
                StatusCode::UNAUTHORIZED,
                Json(json!({"message": "Bad credentials"})),
            );
        }
        assert_eq!(accept, "application/vnd.github+json");
        if body["head"] == "kandev/exists" {
            return (
                StatusCode::UNPROCESSABLE_ENTITY,
                Json(json!({"message": "Validation Failed",
                    "errors": [{"message": "A pull request already exists for acme:kandev/exists."}]})),
            );
        }
        return (
            StatusCode::CREATED,
            Json(json!({"html_url": "https://github.example/acme/app/pull/7", "number": 7})),
        );
    }
    if path == "/api/v4/projects/group%2Fapp/merge_requests" {
        seen.lock()
            .unwrap()
            .push((path, gitlab_auth.clone(), body.clone()));
        if gitlab_auth != "good" {
            return (
                StatusCode::UNAUTHORIZED,
                Json(json!({"message": "401 Unauthorized"})),
            );
        }
        if body["source_branch"] == "kandev/exists" {
            return (
                StatusCode::CONFLICT,
                Json(
                    json!({"message": ["Another open merge request already exists for this source branch: !3"]}),
                ),
            );
        }
        return (
            StatusCode::CREATED,
            Json(
                json!({"web_url": "https://gitlab.example/group/app/-/merge_requests/3", "iid": 3}),
            ),
        );
    }
    (StatusCode::NOT_FOUND, Json(json!({"message": "Not Found"})))
}

/// What `forge` answers a pull request of `branch` on `repository_url`
/// that it refuses.
async fn refusal(
    client: &reqwest::Client,
    forge: &Forge,
    repository_url: &str,
    branch: &str,
) -> ForgeError {
    open_pull_request(client, forge, &spec(repository_url, branch))
        .await
        .unwrap_err()
}

fn spec<'a>(repository_url: &'a str, branch: &'a str) -> PullRequestSpec<'a> {
    PullRequestSpec {
        repository_url,
        branch,
        base: "main",
        title: "Fix the login page",
        body: "Opened by Kandev",
    }
}

#[tokio::test]
async fn pull_and_merge_requests_are_opened_and_refusals_explained() {
    let seen = Seen::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().fallback(fake_forge).with_state(seen.clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client = reqwest::Client::new();
    let forge = |kind, prefix: &str, api: String, token: &str| Forge {
        repository_prefix: prefix.into(),
        kind,
        api_url: api,
        token: token.into(),
    };
    let github = forge(
        ForgeKind::Github,
        "https://github.com/",
        format!("http://{addr}"),
        "good",
    );
    let gitlab = forge(
        ForgeKind::Gitlab,
        "https://gitlab.example/",
        format!("http://{addr}/api/v4/"),
        "good",
    );

    // GitHub: the pull request's shape and token.
    let opened = open_pull_request(
        &client,
        &github,
        &spec("https://github.com/acme/app.git", "kandev/1a2b-fix"),
    )
    .await
    .unwrap();
    assert_eq!(
        opened,
        PullRequest {
            url: "https://github.example/acme/app/pull/7".into(),
            number: 7
        }
    );
    {
        let seen = seen.lock().unwrap();
        let (_, auth, body) = seen.last().unwrap();
        assert_eq!(auth, "Bearer good");
        assert_eq!(
            body,
            &json!({"title": "Fix the login page", "head": "kandev/1a2b-fix", "base": "main",
                    "body": "Opened by Kandev"})
        );
    }
    let exists = refusal(
        &client,
        &github,
        "https://github.com/acme/app",
        "kandev/exists",
    )
    .await;
    assert!(matches!(exists, ForgeError::Exists { .. }), "{exists}");
    assert!(exists.to_string().contains("already exists"), "{exists}");
    let bad_token = forge(
        ForgeKind::Github,
        "https://github.com/",
        format!("http://{addr}"),
        "bad",
    );
    let refused = refusal(
        &client,
        &bad_token,
        "https://github.com/acme/app",
        "kandev/x",
    )
    .await;
    assert!(
        matches!(refused, ForgeError::Unauthorized { status: 401, .. }),
        "{refused}"
    );
    assert!(
        !refused.to_string().contains("bad"),
        "the token stays out of errors: {refused}"
    );
    let unknown = refusal(
        &client,
        &github,
        "https://github.com/acme/other",
        "kandev/x",
    )
    .await;
    assert!(
        matches!(unknown, ForgeError::Unauthorized { status: 404, .. }),
        "{unknown}"
    );

    // GitLab: a merge request with the project path encoded.
    let opened = open_pull_request(
        &client,
        &gitlab,
        &spec("https://gitlab.example/group/app.git", "kandev/1a2b-fix"),
    )
    .await
    .unwrap();
    assert_eq!(
        opened.url,
        "https://gitlab.example/group/app/-/merge_requests/3"
    );
    assert_eq!(opened.number, 3);
    {
        let seen = seen.lock().unwrap();
        let (path, auth, body) = seen.last().unwrap();
        assert_eq!(path, "/api/v4/projects/group%2Fapp/merge_requests");
        assert_eq!(auth, "good");
        assert_eq!(
            body,
            &json!({"source_branch": "kandev/1a2b-fix", "target_branch": "main",
                    "title": "Fix the login page", "description": "Opened by Kandev"})
        );
    }
    let exists = refusal(
        &client,
        &gitlab,
        "https://gitlab.example/group/app",
        "kandev/exists",
    )
    .await;
    assert!(matches!(exists, ForgeError::Exists { .. }), "{exists}");
    let bad_token = forge(
        ForgeKind::Gitlab,
        "https://gitlab.example/",
        format!("http://{addr}/api/v4"),
        "bad",
    );
    let refused = refusal(
        &client,
        &bad_token,
        "https://gitlab.example/group/app",
        "kandev/x",
    )
    .await;
    assert!(
        matches!(refused, ForgeError::Unauthorized { status: 401, .. }),
        "{refused}"
    );

    // An answer larger than a forge's may be is not read.
    let huge = refusal(&client, &github, "https://github.com/acme/huge", "kandev/x").await;
    assert!(
        matches!(huge, ForgeError::Call(CallError::TooLarge { .. })),
        "{huge}"
    );

    // A forge that is down is said to be unreachable.
    let down = forge(
        ForgeKind::Github,
        "https://github.com/",
        "http://127.0.0.1:9".into(),
        "good",
    );
    let unreachable = refusal(&client, &down, "https://github.com/acme/app", "kandev/x").await;
    assert!(
        matches!(unreachable, ForgeError::Call(CallError::Unreachable { .. })),
        "{unreachable}"
    );
    server.abort();
}
