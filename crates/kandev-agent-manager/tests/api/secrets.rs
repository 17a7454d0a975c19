//! Users' own secrets, and the operator's credentials only on an admin's
//! opt-in.

use kandev_proto::v1 as pb;
use sqlx::Row as _;
use uuid::Uuid;

use crate::helpers::{
    TaskWatch, TestApp, containers_of, git_repo, inspect, launch_request, spawn_app_with,
};

const KEY: &str = "a-test-secrets-key-of-32-bytes-or-more";

async fn set(app: &mut TestApp, scope: &str, name: &str, value: &str) -> Result<(), tonic::Status> {
    app.client
        .set_user_secret(pb::SetUserSecretRequest {
            scope: scope.into(),
            name: name.into(),
            value: value.into(),
        })
        .await
        .map(|_| ())
}

async fn names(app: &mut TestApp, scope: &str) -> Vec<String> {
    let list = app
        .client
        .list_user_secrets(pb::ListUserSecretsRequest {
            scope: scope.into(),
        })
        .await
        .unwrap()
        .into_inner();
    list.secrets.into_iter().map(|s| s.name).collect()
}

/// The environment and mount targets of the container of a run for `scope`.
async fn run_for(app: &mut TestApp, agent_type: &str, scope: &str) -> (String, Vec<String>) {
    let repo = git_repo(app.dir.path());
    let task = Uuid::new_v4();
    let mut watch = TaskWatch::start(task).await;
    let instance = app
        .client
        .launch_agent(pb::LaunchAgentRequest {
            home_scope: scope.into(),
            ..launch_request(task, agent_type, &repo, "wait-cancel")
        })
        .await
        .unwrap()
        .into_inner();
    watch.until("agent.running", 0).await;
    let ids = containers_of(&instance.id);
    let info = inspect(&ids[0]);
    let env = info["Config"]["Env"].to_string();
    let mounts = info["Mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["Destination"].as_str().unwrap().to_string())
        .collect();
    app.client
        .stop_agent(pb::StopAgentRequest {
            instance_id: instance.id,
            reason: "seen".into(),
        })
        .await
        .unwrap();
    (env, mounts)
}

#[tokio::test]
async fn secrets_are_sealed_listed_by_name_and_reach_only_their_users_runs() {
    let mut app = spawn_app_with(|s| {
        s.secrets_key = Some(KEY.into());
        s.host_env
            .insert("GITHUB_TOKEN".into(), "ghp-operator-own".into());
    })
    .await;
    std::fs::create_dir_all(app.path("home").join(".ssh")).unwrap();
    app.mock_type("mock-env", |t| {
        t.optional_env = vec!["GITHUB_TOKEN".into(), "ANTHROPIC_API_KEY".into()];
        t.credential_mounts = Some(pb::CredentialMounts {
            ssh: true,
            gitconfig: true,
            git_credentials: true,
        });
    })
    .await;
    set(&mut app, "alice", "ANTHROPIC_API_KEY", "sk-alice-secret")
        .await
        .unwrap();
    set(&mut app, "alice", "GITHUB_TOKEN", "ghp-first")
        .await
        .unwrap();
    // Setting again replaces.
    set(&mut app, "alice", "GITHUB_TOKEN", "ghp-alice-own")
        .await
        .unwrap();
    assert_eq!(
        names(&mut app, "alice").await,
        ["ANTHROPIC_API_KEY", "GITHUB_TOKEN"]
    );
    assert!(names(&mut app, "bob").await.is_empty());

    // At rest, values are sealed.
    let pool = sqlx::PgPool::connect(&app.db.url).await.unwrap();
    let rows = sqlx::query("SELECT scope, ciphertext FROM agent_manager.user_secrets")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    for row in &rows {
        let sealed: Vec<u8> = row.get("ciphertext");
        assert!(
            !String::from_utf8_lossy(&sealed).contains("alice"),
            "plaintext stored"
        );
    }

    // Alice's run gets her values and not the operator's token or files;
    // Bob's run gets neither hers nor the operator's.
    let (env, mounts) = run_for(&mut app, "mock-env", "alice").await;
    assert!(env.contains("ANTHROPIC_API_KEY=sk-alice-secret"), "{env}");
    assert!(env.contains("GITHUB_TOKEN=ghp-alice-own"), "{env}");
    assert!(!env.contains("ghp-operator-own"), "{env}");
    assert!(!mounts.iter().any(|m| m.contains(".ssh")), "{mounts:?}");
    let (env, mounts) = run_for(&mut app, "mock-env", "bob").await;
    assert!(!env.contains("ANTHROPIC_API_KEY"), "{env}");
    assert!(!env.contains("GITHUB_TOKEN"), "{env}");
    assert!(!mounts.iter().any(|m| m.contains(".ssh")), "{mounts:?}");

    // An admin's opt-in gives the type the operator's token and files; the
    // user's own value still comes first.
    app.mock_type("mock-env-host", |t| {
        t.optional_env = vec!["GITHUB_TOKEN".into()];
        t.credential_mounts = Some(pb::CredentialMounts {
            ssh: true,
            gitconfig: false,
            git_credentials: false,
        });
        t.host_credentials = true;
    })
    .await;
    let (env, mounts) = run_for(&mut app, "mock-env-host", "bob").await;
    assert!(env.contains("GITHUB_TOKEN=ghp-operator-own"), "{env}");
    assert!(
        mounts.contains(&"/home/agent/.ssh".to_string()),
        "{mounts:?}"
    );
    let (env, _) = run_for(&mut app, "mock-env-host", "alice").await;
    assert!(env.contains("GITHUB_TOKEN=ghp-alice-own"), "{env}");

    // Deleting removes it from the next run; deleting again is a 404.
    app.client
        .delete_user_secret(pb::DeleteUserSecretRequest {
            scope: "alice".into(),
            name: "ANTHROPIC_API_KEY".into(),
        })
        .await
        .unwrap();
    let again = app
        .client
        .delete_user_secret(pb::DeleteUserSecretRequest {
            scope: "alice".into(),
            name: "ANTHROPIC_API_KEY".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::NotFound);
    let (env, _) = run_for(&mut app, "mock-env", "alice").await;
    assert!(!env.contains("ANTHROPIC_API_KEY"), "{env}");
    pool.close().await;
    app.stop().await;
}

#[tokio::test]
async fn bad_secrets_are_refused_and_nothing_is_stored_without_a_key() {
    let mut app = spawn_app_with(|s| s.secrets_key = Some(KEY.into())).await;
    for (name, value) in [
        ("not-a-name", "v"),
        ("TASK_DESCRIPTION", "v"),
        ("EMPTY", ""),
        ("NUL", "a\0b"),
    ] {
        let err = set(&mut app, "alice", name, value).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{name}");
    }
    let big = "v".repeat(kandev_agent_manager::credentials::MAX_SECRET_BYTES + 1);
    let err = set(&mut app, "alice", "BIG", &big).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let err = set(&mut app, "", "NAME", "v").await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(names(&mut app, "alice").await.is_empty());
    app.stop().await;

    let mut keyless = spawn_app_with(|s| s.secrets_key = None).await;
    let err = set(&mut keyless, "alice", "GITHUB_TOKEN", "ghp")
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert!(err.message().contains("KANDEV_SECRETS_KEY"), "{err:?}");
    keyless.stop().await;
}
