//! A pushed commit's CI checks read from a local server that implements
//! the few GitHub endpoints Kandev reads: check runs, commit statuses and
//! an Actions job's log; and a fake GitLab's pipeline jobs and traces.
//! What a forge writes is bounded and cleaned.

use kandev_orchestrator::{
    checks::{ChecksError, MAX_LOG_TAIL, read_checks, summarize},
    forge::{CallError, Forge, ForgeKind},
};
use kandev_testkit::fake_github::FakeGithub;
use kandev_testkit::fake_gitlab::FakeGitlab;
use serde_json::json;

/// The fake GitHub with `acme/app`'s checks: a build timed out with a
/// long, hostile output, a test still running, an e2e failed with its
/// log only in its job's log, and a deploy status in error.
async fn fake_github() -> FakeGithub {
    let github = FakeGithub::start().await;
    github.serve("acme/app", vec![]);
    let mut forge = github.forge();
    forge.token = Some("good".into());
    forge.check_runs = vec![
        json!({"id": 1, "name": "build\u{1b}[31m", "status": "completed", "conclusion": "timed_out",
         "html_url": "javascript:alert(1)",
         "output": {"summary": "", "text": format!("{}THE END\0", "x".repeat(9000))}}),
        json!({"id": 2, "name": "test", "status": "in_progress", "conclusion": null,
         "html_url": "https://ci.example/2"}),
        json!({"id": 3, "name": "e2e", "status": "completed", "conclusion": "failure",
         "output": {"summary": null, "text": null}}),
    ];
    forge.statuses = vec![json!({"context": "deploy", "state": "error",
        "description": "quota exceeded", "target_url": "https://ci.example/deploy"})];
    forge
        .job_logs
        .insert(3, "step 1\nstep 2\npanicked at e2e.rs:9\n".into());
    drop(forge);
    github
}

#[tokio::test]
async fn check_runs_and_statuses_are_read_bounded() {
    let server = fake_github().await;
    let addr = server.url.trim_start_matches("http://").to_string();
    let client = reqwest::Client::new();
    let forge = |token: &str, kind| Forge {
        repository_prefix: "https://github.com/".into(),
        kind,
        api_url: format!("http://{addr}/"),
        token: token.into(),
    };
    let github = forge("good", ForgeKind::Github);
    let url = "https://github.com/acme/app.git";

    let checks = read_checks(&client, &github, url, "abc123").await.unwrap();
    assert_eq!(checks.len(), 4, "{checks:?}");
    let build = &checks[0];
    // Control characters dropped, a link only if http(s), the end kept.
    assert_eq!(build.name, "build[31m");
    assert!(build.failed && build.url.is_empty(), "{build:?}");
    assert_eq!(build.log_tail.len(), MAX_LOG_TAIL);
    assert!(
        build.log_tail.ends_with("THE END"),
        "{}",
        &build.log_tail[4000..]
    );
    assert!(!checks[1].failed && checks[1].status == "in_progress");
    // No output: the job's log.
    assert!(checks[2].failed);
    assert!(
        checks[2].log_tail.contains("panicked at e2e.rs:9"),
        "{:?}",
        checks[2]
    );
    let deploy = &checks[3];
    assert_eq!(
        (
            deploy.kind.as_str(),
            deploy.failed,
            deploy.log_tail.as_str()
        ),
        ("status", true, "quota exceeded")
    );
    assert_eq!(
        summarize(&checks),
        kandev_orchestrator::checks::CheckState::Failure
    );

    // A refused token, a bad commit id.
    let refused = read_checks(
        &client,
        &forge("s3cret-wrong", ForgeKind::Github),
        url,
        "abc123",
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&refused, ChecksError::Call(CallError::Refused { status: 401, message, .. }) if message == "Bad credentials"),
        "{refused:?}"
    );
    assert!(!refused.to_string().contains("s3cret"), "{refused}");
    assert!(matches!(
        read_checks(&client, &github, url, "../../x").await,
        Err(ChecksError::BadCommit(_))
    ));
}

/// A commit's latest GitLab pipeline: each job a check, a failed one with
/// the end of its trace; an unknown job status, a wrong token and a
/// missing project are errors.
#[tokio::test]
async fn gitlab_pipeline_jobs_are_read_as_checks() {
    let gitlab = FakeGitlab::start("glpat-good").await;
    gitlab.serve("group/sub/app", Vec::new());
    let trace = format!(
        "{}rspec ./spec/login_spec.rb:9 # fails\n",
        "x\n".repeat(5000)
    );
    // An older pipeline of the same commit is not read.
    gitlab.pipeline(
        "group/sub/app",
        7,
        "abc123",
        &[(70, "old", "failed", "old")],
    );
    gitlab.pipeline(
        "group/sub/app",
        8,
        "abc123",
        &[
            (81, "build", "success", ""),
            (82, "rspec", "failed", &trace),
            (83, "deploy", "manual", ""),
            (84, "lint", "running", ""),
        ],
    );
    let client = reqwest::Client::new();
    let forge = |token: &str| Forge {
        repository_prefix: "https://gitlab.example/".into(),
        kind: ForgeKind::Gitlab,
        api_url: gitlab.api_url(),
        token: token.into(),
    };
    let url = "https://gitlab.example/group/sub/app.git";
    let checks = read_checks(&client, &forge("glpat-good"), url, "abc123")
        .await
        .unwrap();
    let names: Vec<&str> = checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["build", "rspec", "deploy", "lint"]);
    let rspec = &checks[1];
    assert!(
        rspec.failed && rspec.kind == "job" && rspec.conclusion == "failure",
        "{rspec:?}"
    );
    assert_eq!(rspec.url, "https://gitlab.example/group/sub/app/-/jobs/82");
    assert!(
        rspec.log_tail.ends_with("login_spec.rb:9 # fails\n"),
        "{rspec:?}"
    );
    assert_eq!(rspec.log_tail.len(), MAX_LOG_TAIL);
    assert!(!checks[0].failed && !checks[2].failed && checks[3].status == "in_progress");
    assert_eq!(
        summarize(&checks),
        kandev_orchestrator::checks::CheckState::Failure
    );
    {
        let asked = gitlab.state.lock().unwrap().asked.clone();
        assert!(
            asked
                .iter()
                .any(|(_, p)| p
                    .starts_with("/api/v4/projects/group%2Fsub%2Fapp/pipelines?sha=abc123")),
            "{asked:?}"
        );
        assert!(
            !asked.iter().any(|(_, p)| p.contains("/jobs/70")),
            "{asked:?}"
        );
    }
    // No pipeline yet: no checks (still pending).
    let none = read_checks(&client, &forge("glpat-good"), url, "def456")
        .await
        .unwrap();
    assert!(none.is_empty());

    gitlab.pipeline(
        "group/sub/app",
        9,
        "abc999",
        &[(91, "odd", "teleported", "")],
    );
    let unknown = read_checks(&client, &forge("glpat-good"), url, "abc999")
        .await
        .unwrap_err();
    assert!(
        matches!(&unknown, ChecksError::UnknownStatus { status, check, .. } if status == "teleported" && check == "odd"),
        "{unknown:?}"
    );
    let refused = read_checks(&client, &forge("glpat-bad"), url, "abc123")
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, ChecksError::Call(CallError::Refused { status: 401, message, .. }) if message == "401 Unauthorized"),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("GitLab"), "{refused}");
    let missing = read_checks(
        &client,
        &forge("glpat-good"),
        "https://gitlab.example/group/gone.git",
        "abc123",
    )
    .await
    .unwrap_err();
    assert!(
        missing.to_string().contains("404 Project Not Found"),
        "{missing}"
    );
}
