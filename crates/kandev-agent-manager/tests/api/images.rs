//! Agent images Kandev builds itself: a launch of a type whose image is
//! missing builds it from the recipe in the repository (one build for
//! concurrent launches, progress published as `agent.preparing`), and a
//! build that cannot run fails the task with its reason.

use std::process::Command;

use kandev_proto::v1 as pb;
use uuid::Uuid;

use crate::helpers::{TaskWatch, TestApp, git_repo, launch_request, spawn_app_with};

/// The recipe built here: the smallest of the real agents'.
const IMAGE: &str = "kandev/augment-agent:latest";

fn remove_image() {
    // Absent already is fine.
    let _ = Command::new("docker").args(["rmi", "-f", IMAGE]).output();
}

fn image_id() -> Option<String> {
    let out = Command::new("docker")
        .args(["image", "inspect", "-f", "{{.Id}}", IMAGE])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `augment-agent` under another id, without a network (this engine has no
/// bridge), so it starts here.
async fn built_type(app: &mut TestApp) -> &'static str {
    let mut t = app.agent_type("augment-agent").await;
    t.id = "augment-built".into();
    t.network_mode = "none".into();
    app.client
        .upsert_agent_type(pb::UpsertAgentTypeRequest {
            agent_type: Some(t),
        })
        .await
        .unwrap();
    "augment-built"
}

async fn launch(app: &mut TestApp, agent_type: &str, repo: &str) -> (Uuid, TaskWatch) {
    let task = Uuid::new_v4();
    let watch = TaskWatch::start(task).await;
    let mut request = launch_request(task, agent_type, repo, "hi");
    request
        .env
        .insert("AUGMENT_SESSION_AUTH".into(), "{\"test\":true}".into());
    let instance = app.client.launch_agent(request).await.unwrap().into_inner();
    // Answered at once: the build goes on after the launch.
    assert_eq!(instance.status, pb::AgentStatus::Pending as i32);
    (task, watch)
}

/// Stops the app and removes its containers (agents outlive their
/// manager on purpose; these would run on).
async fn stop(app: TestApp) {
    let manager = app.db.name.clone();
    app.stop().await;
    tokio::task::spawn_blocking(move || kandev_testkit::remove_containers(&manager))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_agent_image_is_built_from_its_recipe_once_for_concurrent_launches() {
    let base = tokio::task::spawn_blocking(kandev_testkit::ensure_agent_base)
        .await
        .unwrap();

    // A base that is not there: the task fails with the build's reason.
    let mut app =
        spawn_app_with(|s| s.agent_base_image = "kandev/no-such-base:latest".into()).await;
    let repo = git_repo(app.dir.path());
    let agent_type = built_type(&mut app).await;
    tokio::task::spawn_blocking(remove_image).await.unwrap();
    let (_, mut watch) = launch(&mut app, agent_type, &repo).await;
    let failed = watch.until("agent.failed", 0).await;
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("the agent image {IMAGE} could not be built")),
        "{error}"
    );
    assert!(error.contains("kandev/no-such-base:latest"), "{error}");
    assert!(error.contains("dockerfiles/agent-base/build.sh"), "{error}");
    let t = app.agent_type(agent_type).await;
    assert_eq!(t.image_status, "failed");
    assert!(t.image_error.unwrap().contains("no-such-base"));
    stop(app).await;

    // The real base: two launches at once wait for one build.
    let mut app = spawn_app_with(|s| s.agent_base_image = base.into()).await;
    let repo = git_repo(app.dir.path());
    let agent_type = built_type(&mut app).await;
    assert_eq!(app.agent_type(agent_type).await.image_status, "missing");
    let (_, mut first) = launch(&mut app, agent_type, &repo).await;
    let (_, mut second) = launch(&mut app, agent_type, &repo).await;
    let mut built = Vec::new();
    for watch in [&mut first, &mut second] {
        let preparing = watch.until("agent.preparing", 0).await;
        // A launch that joins a build under way may first hear its
        // progress ("…: Step 1/14 : …").
        let summary = preparing["summary"].as_str().unwrap_or_default();
        let started = format!("preparing the agent image {IMAGE}");
        assert!(
            summary == started || summary.starts_with(&format!("{started}: ")),
            "{preparing}"
        );
        // Then the agent itself starts, in the image just built.
        watch.until("agent.started", 0).await;
        let done: Vec<String> = watch
            .lifecycle
            .iter()
            .filter(|(s, _)| s == "agent.preparing")
            .filter_map(|(_, d)| d["summary"].as_str().map(String::from))
            .filter(|s| s.contains("was built in"))
            .collect();
        assert_eq!(done.len(), 1, "{:?}", watch.lifecycle);
        built.push(done[0].clone());
    }
    // One build: both heard the same end.
    assert_eq!(built[0], built[1]);
    assert!(image_id().is_some());
    let t = app.agent_type(agent_type).await;
    assert_eq!(t.image_status, "present");
    assert!(t.image_build_seconds.is_some_and(|s| s >= 0.0));
    assert!(t.image_error.is_none());

    // Present and current: the next launch starts without a build.
    let (_, mut third) = launch(&mut app, agent_type, &repo).await;
    third.until("agent.started", 0).await;
    assert!(
        third.lifecycle.iter().all(|(s, _)| s != "agent.preparing"),
        "{:?}",
        third.lifecycle
    );
    stop(app).await;
}
