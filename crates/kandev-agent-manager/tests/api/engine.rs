//! The Docker engine restarting under the manager. Each test runs its own
//! `dockerd` (own socket and data, see `kandev_testkit::OwnDocker`), so it
//! can stop, kill and restart it without disturbing the other tests.

use std::{sync::Arc, time::Duration};

use kandev_proto::v1 as pb;
use uuid::Uuid;

use kandev_agent_manager::{Application, domain::InstanceStatus};

use crate::helpers::{
    MOCK_IMAGE, OwnDocker, TaskWatch, TestApp, TestDb, assert_slow_stream_complete, git_repo,
    launch_then_die, manager_dir, mock_launch, settings, spawn_app_with,
};

/// A private engine holding the mock-agent image, shared with blocking
/// calls.
async fn own_engine(live_restore: bool) -> Arc<std::sync::Mutex<OwnDocker>> {
    own_engine_configured(live_restore, "{}").await
}

/// [`own_engine`] with `daemon_json` as the engine's configuration.
async fn own_engine_configured(
    live_restore: bool,
    daemon_json: &'static str,
) -> Arc<std::sync::Mutex<OwnDocker>> {
    tokio::task::spawn_blocking(move || {
        kandev_testkit::ensure_docker();
        let engine = OwnDocker::start_configured(live_restore, daemon_json);
        engine.load_image(MOCK_IMAGE);
        Arc::new(std::sync::Mutex::new(engine))
    })
    .await
    .unwrap()
}

/// Runs `f` on the engine off the async threads.
async fn with_engine<T: Send + 'static>(
    engine: &Arc<std::sync::Mutex<OwnDocker>>,
    f: impl FnOnce(&mut OwnDocker) -> T + Send + 'static,
) -> T {
    let engine = engine.clone();
    tokio::task::spawn_blocking(move || f(&mut engine.lock().unwrap()))
        .await
        .unwrap()
}

async fn app_on(engine: &Arc<std::sync::Mutex<OwnDocker>>, grace_secs: u64) -> (TestApp, String) {
    let host = engine.lock().unwrap().host();
    let docker_host = host.clone();
    let app = spawn_app_with(move |s| {
        s.docker_host = docker_host;
        s.engine_grace_secs = grace_secs;
    })
    .await;
    let repo = git_repo(app.dir.path());
    (app, repo)
}

/// Waits until the instance's containers are gone from `engine`.
async fn until_no_container(engine: &Arc<std::sync::Mutex<OwnDocker>>, instance_id: &str) {
    let label = format!("kandev.instance_id={instance_id}");
    for _ in 0..150 {
        let label = label.clone();
        if with_engine(engine, move |e| e.containers(&label))
            .await
            .is_empty()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the container of {instance_id} was left behind");
}

/// `GET /readyz`: its status code and body.
async fn readyz(app: &TestApp) -> (u16, serde_json::Value) {
    kandev_testkit::http("GET", &format!("http://{}/readyz", app.addr), None).await
}

/// Launches the mock agent with `prompt` on a new task, watched from before
/// the launch.
async fn launch_watched(
    app: &mut TestApp,
    repo: &str,
    prompt: &str,
) -> (TaskWatch, pb::AgentInstance) {
    let task = Uuid::new_v4();
    let watch = TaskWatch::start(task).await;
    let instance = app.launch(task, "mock-agent", repo, prompt).await.unwrap();
    (watch, instance)
}

async fn wait_for_chunk(watch: &mut TaskWatch, n: usize, of: usize) {
    let want = format!("chunk {n}/{of}\n");
    watch
        .until_event(|e| e["kind"] == "message_chunk" && e["data"]["text"] == want.as_str())
        .await;
}

/// A plain engine restart (no live restore) stops the agent's container:
/// the turn fails saying so, `agent.failed` goes out, the container is
/// removed, and the next launch on the same manager works.
#[tokio::test]
async fn an_engine_restart_fails_the_turn_cleanly_and_the_next_launch_works() {
    let engine = own_engine(false).await;
    let (mut app, repo) = app_on(&engine, 60).await;
    let (mut watch, instance) = launch_watched(&mut app, &repo, "slow 200 100").await;
    wait_for_chunk(&mut watch, 3, 200).await;

    with_engine(&engine, |e| {
        e.stop();
        e.start_again();
    })
    .await;

    let failed = watch.until("agent.failed", 0).await;
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.starts_with("the Docker engine restarted during the turn and stopped the agent"),
        "{error}"
    );
    let status = app.status(&instance.id).await;
    assert_eq!(status.status, pb::AgentStatus::Failed as i32);
    assert_eq!(status.error, error);
    until_no_container(&engine, &instance.id).await;
    // Nothing after the failure: the stream up to it is contiguous.
    watch.assert_contiguous();

    // The manager goes on with the restarted engine.
    let (mut next_watch, instance) = launch_watched(&mut app, &repo, "scenario: code").await;
    let done = next_watch.until("agent.completed", 0).await;
    assert_eq!(done["stop_reason"], "end_turn");
    until_no_container(&engine, &instance.id).await;
    app.stop().await;
}

/// With live restore the agent survives even a killed engine: the manager
/// re-attaches when the engine is back and the stream goes on, every seq
/// exactly once and every chunk delivered, to the end of the turn.
#[tokio::test]
async fn an_agent_survives_a_killed_engine_with_live_restore() {
    let engine = own_engine(true).await;
    let (mut app, repo) = app_on(&engine, 60).await;
    let (mut watch, instance) = launch_watched(&mut app, &repo, "slow 60 100").await;
    wait_for_chunk(&mut watch, 5, 60).await;

    with_engine(&engine, |e| {
        e.kill();
        // Chunks written while the engine is away are kept by its log.
        std::thread::sleep(Duration::from_millis(1000));
        e.start_again();
    })
    .await;

    let done = watch.until("agent.completed", 0).await;
    assert_eq!(done["stop_reason"], "end_turn");
    let last = assert_slow_stream_complete(&watch.events, 60);
    // Re-attached in the same process: not even a repeated seq.
    assert_eq!(watch.seqs(), (1..=last).collect::<Vec<_>>());
    let status = app.status(&instance.id).await;
    assert_eq!(status.status, pb::AgentStatus::Completed as i32);
    assert_eq!(status.last_seq, last as i64);
    until_no_container(&engine, &instance.id).await;
    app.stop().await;
}

/// An engine that stays away longer than `engine_grace_secs` fails the
/// turn; launches meanwhile answer UNAVAILABLE and fail their instance;
/// `/readyz` reports the engine. When it is back the manager removes the
/// container the failed turn could not, and launches work again.
#[tokio::test]
async fn an_engine_away_too_long_fails_turns_and_is_cleaned_up_when_back() {
    let engine = own_engine(false).await;
    let (mut app, repo) = app_on(&engine, 2).await;
    let (mut watch, instance) = launch_watched(&mut app, &repo, "slow 200 100").await;
    wait_for_chunk(&mut watch, 2, 200).await;

    with_engine(&engine, OwnDocker::stop).await;
    let failed = watch.until("agent.failed", 0).await;
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.starts_with(
            "the Docker engine went away during the turn and did not answer again within 2 s"
        ),
        "{error}"
    );

    let (status, body) = readyz(&app).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["checks"]["docker"]
            .as_str()
            .unwrap()
            .contains("the Docker engine does not answer"),
        "{body}"
    );
    let down_task = Uuid::new_v4();
    let mut down_watch = TaskWatch::start(down_task).await;
    let refused = app
        .launch(down_task, "mock-agent", &repo, "scenario: code")
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(
        refused
            .message()
            .contains("the Docker engine is unreachable"),
        "{}",
        refused.message()
    );
    let down_failed = down_watch.until("agent.failed", 0).await;
    assert_eq!(down_failed["error"], refused.message());

    with_engine(&engine, OwnDocker::start_again).await;
    // The engine kept the stopped container; the manager removes it.
    until_no_container(&engine, &instance.id).await;
    let (status, body) = readyz(&app).await;
    assert_eq!(status, 200, "{body}");
    let (mut again_watch, _) = launch_watched(&mut app, &repo, "scenario: code").await;
    let done = again_watch.until("agent.completed", 0).await;
    assert_eq!(done["stop_reason"], "end_turn");
    app.stop().await;
}

/// A manager started while the engine is down starts anyway and reports
/// it in `/readyz`; once the engine answers it reconciles (removing a
/// container left for an unknown instance) and launches work.
#[tokio::test]
async fn the_manager_starts_while_the_engine_is_down() {
    let engine = own_engine(false).await;
    let manager_id = format!("kandev-engine-test-{}", Uuid::new_v4().simple());
    let leftover = Uuid::new_v4().to_string();
    {
        let (manager_id, leftover) = (manager_id.clone(), leftover.clone());
        with_engine(&engine, move |e| {
            let status = e
                .cli()
                .args(["create", "--network", "none", "--label"])
                .arg(format!("kandev.manager={manager_id}"))
                .arg("--label")
                .arg(format!("kandev.instance_id={leftover}"))
                .arg(MOCK_IMAGE)
                .stdout(std::process::Stdio::null())
                .status()
                .unwrap();
            assert!(status.success());
            e.stop();
        })
        .await;
    }
    let host = engine.lock().unwrap().host();
    let mut app = spawn_app_with(move |s| {
        s.docker_host = host;
        s.manager_id = manager_id;
    })
    .await;
    let (status, body) = readyz(&app).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["checks"]["postgres"], "ok", "{body}");

    with_engine(&engine, OwnDocker::start_again).await;
    until_no_container(&engine, &leftover).await;
    let (status, body) = readyz(&app).await;
    assert_eq!(status, 200, "{body}");
    let repo = git_repo(app.dir.path());
    let (mut watch, _) = launch_watched(&mut app, &repo, "scenario: code").await;
    let done = watch.until("agent.completed", 0).await;
    assert_eq!(done["stop_reason"], "end_turn");
    app.stop().await;
}

/// An operator's `docker stop` is not an engine restart: the engine stays
/// up, so after the shutdown window the turn fails naming the signal, and
/// the container is removed.
#[tokio::test]
async fn a_container_stopped_from_outside_fails_the_turn_saying_so() {
    let engine = own_engine(false).await;
    let (mut app, repo) = app_on(&engine, 60).await;
    let (mut watch, instance) = launch_watched(&mut app, &repo, "slow 200 100").await;
    wait_for_chunk(&mut watch, 2, 200).await;

    // The launch answers before the container exists: find it by label.
    let label = format!("kandev.instance_id={}", instance.id);
    with_engine(&engine, move |e| {
        let container = e.containers(&label).pop().expect("the agent's container");
        let status = e
            .cli()
            .args(["stop", "-t", "1", &container])
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
    })
    .await;

    let failed = watch.until("agent.failed", 0).await;
    assert_eq!(
        failed["error"],
        "the agent's container was stopped from outside Kandev (signal 15) during the turn"
    );
    let status = app.status(&instance.id).await;
    assert_eq!(status.status, pb::AgentStatus::Failed as i32);
    until_no_container(&engine, &instance.id).await;
    app.stop().await;
}

/// The agent's output is read back from the engine's log after a restart
/// of the manager, so agent containers log with settings of their own, not
/// the engine's defaults: an engine that rotates every container's log
/// after 1 KiB (the first lines gone when the manager comes back), or that
/// keeps no log at all, still gives every seq once, in order.
#[tokio::test]
async fn a_restarted_manager_reads_all_the_output_whatever_the_engine_logs_by_default() {
    for daemon in [
        r#"{"log-driver": "json-file", "log-opts": {"max-size": "1k", "max-file": "2"}}"#,
        r#"{"log-driver": "local", "log-opts": {"max-size": "1k", "max-file": "2"}}"#,
        r#"{"log-driver": "none"}"#,
    ] {
        let engine = own_engine_configured(false, daemon).await;
        let db = TestDb::create().await;
        let dir = manager_dir();
        let mut settings = settings(&db, dir.path());
        settings.docker_host = engine.lock().unwrap().host();
        let repo = git_repo(dir.path());
        let task = Uuid::new_v4();
        let mut watch = TaskWatch::start(task).await;

        // Mid-turn, with more than 2 KiB of output written.
        let launch = mock_launch(task, &repo, "slow 40 50");
        let id = launch_then_die(settings.clone(), vec![launch], 15)[0];

        let app = Application::build(settings).await.unwrap();
        let done = watch.until("agent.completed", 0).await;
        assert_eq!(done["stop_reason"], "end_turn", "engine {daemon}");
        let last = assert_slow_stream_complete(&watch.events, 40);
        let resumed = app.manager().get_instance(id).await.unwrap();
        assert_eq!(resumed.status, InstanceStatus::Completed, "engine {daemon}");
        assert_eq!(resumed.last_seq, last as i64);
        drop(app);
        db.drop_db().await;
        // Its last reference: the engine stops (blocking) as it drops.
        tokio::task::spawn_blocking(move || drop(engine))
            .await
            .unwrap();
    }
}
