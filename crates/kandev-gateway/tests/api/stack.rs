//! The whole stack in-process, no stand-ins: the gateway in front of the
//! real task service, orchestrator and agent manager, on a private NATS and
//! a fresh Postgres database, with the mock agent in Docker
//! (`kandev/mock-agent:latest`, built by `kandev_testkit::ensure_docker`
//! when missing). A task created through REST reaches the orchestrator,
//! runs, and its feed flows through the gateway's WebSocket proxy.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use axum::http::StatusCode;
use futures::{SinkExt, StreamExt};
use kandev_testkit::{OwnNats, eventually};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{self as tg, client::IntoClientRequest};

use crate::helpers::{Resp, TestApp, TestDb, gateway_settings, spawn_gateway};

#[path = "../support/serve.rs"]
mod serve;
use serve::{Service, serve};

pub(crate) struct Stack {
    pub(crate) gateway: TestApp,
    services: Vec<Service>,
    am_dir: PathBuf,
    _nats: OwnNats,
}

impl Stack {
    pub(crate) async fn start() -> Stack {
        tokio::task::spawn_blocking(kandev_testkit::ensure_docker)
            .await
            .unwrap();
        let nats = OwnNats::start().await;
        let db = TestDb::create().await;

        let tasks = kandev_task_service::Settings {
            common: kandev_testkit::service_settings(
                kandev_task_service::Settings::default().common,
                &db.url,
                &nats.url(),
            ),
            outbox_poll_ms: 100,
            ..Default::default()
        };
        let (tasks_addr, tasks) = serve!(kandev_task_service, tasks, "task service");

        let am_dir = kandev_testkit::agent_manager_dir("kandev-gw-am");
        let agents = kandev_agent_manager::Settings {
            common: kandev_testkit::service_settings(
                kandev_agent_manager::Settings::default().common,
                &db.url,
                &nats.url(),
            ),
            manager_id: db.name.clone(),
            pull_images: false,
            initialize_timeout_secs: 20,
            seq_flush_ms: 100,
            secrets_key: Some("a-secrets-key-for-the-gateway-stack-test".into()),
            ..kandev_agent_manager::Settings::rooted_in(&am_dir)
        };
        let (agents_addr, agents) = serve!(kandev_agent_manager, agents, "agent manager");

        let orchestrator = kandev_orchestrator::Settings {
            common: kandev_testkit::service_settings(
                kandev_orchestrator::Settings::default().common,
                &db.url,
                &nats.url(),
            ),
            task_service_url: format!("http://{tasks_addr}"),
            agent_manager_url: format!("http://{agents_addr}"),
            feed_flush_ms: 20,
            ..Default::default()
        };
        let (orchestrator_addr, orchestrator) =
            serve!(kandev_orchestrator, orchestrator, "orchestrator");

        let mut settings = gateway_settings(&db, tasks_addr);
        settings.agent_manager_url = format!("http://{agents_addr}");
        settings.orchestrator_url = format!("http://{orchestrator_addr}");
        settings.common.nats_url = nats.url();
        settings.downstream_timeout_ms = 30_000;
        let gateway = spawn_gateway(db, settings).await;
        Stack {
            gateway,
            services: vec![orchestrator, agents, tasks],
            am_dir,
            _nats: nats,
        }
    }

    pub(crate) async fn stop(self) {
        let Stack {
            mut gateway,
            services,
            am_dir,
            _nats,
        } = self;
        // The gateway first, then its dependencies; the database last.
        let db = gateway.take_db();
        gateway.stop().await;
        for service in services {
            service.cancel();
            service.stopped().await;
        }
        kandev_testkit::remove_containers(&db.name);
        db.drop_db().await;
        let _ = std::fs::remove_dir_all(am_dir);
    }
}

pub(crate) async fn next_json<S>(ws: &mut S) -> Value
where
    S: futures::Stream<Item = Result<tg::Message, tg::Error>> + Unpin,
{
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(60), ws.next())
            .await
            .expect("a frame in time")
            .expect("the stream is open")
            .expect("a valid frame");
        if let tg::Message::Text(text) = msg {
            return serde_json::from_str(text.as_str()).unwrap();
        }
    }
}

#[tokio::test]
async fn stack_a_rest_task_reaches_the_orchestrator_and_streams_through_the_gateway() {
    let mut stack = Stack::start().await;
    let app = &stack.gateway;
    let alice = app.token("alice", false);
    let bob = app.token("bob", false);
    let admin = app.token("admin", true);

    // Every dependency is up (NATS connects in the background, so the
    // gateway may answer 503 for a moment after its start).
    eventually(10, "the gateway ready", || async {
        let ready = app
            .call(axum::http::Method::GET, "/readyz", None, None)
            .await;
        (ready.status == StatusCode::OK).then_some(())
    })
    .await;

    // The registry, through the gateway.
    let types = app.get("/api/v1/agent-types", &alice).await;
    assert_eq!(types.status, StatusCode::OK, "{}", types.body);
    assert!(
        types.body["agent_types"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == "mock-agent"),
        "{}",
        types.body
    );

    // A task created through REST with an agent type...
    let board = app.board(&alice, "stack").await;
    let created = app
        .post(
            &format!("/api/v1/boards/{board}/tasks"),
            &alice,
            json!({"title": "Edit the readme", "description": "scenario: code",
                   "agent_type": "mock-agent", "max_retries": 0}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let task_id = created.body["id"].as_str().unwrap().to_string();

    // ...is picked up by the orchestrator, which launches the agent.
    let exec = eventually(120, "an execution with an instance", || async {
        let r = app
            .get(
                &format!("/api/v1/orchestrator/tasks/{task_id}/status"),
                &alice,
            )
            .await;
        (r.status == StatusCode::OK && r.body["instance_id"].is_string()).then_some(r.body)
    })
    .await;
    let instance = exec["instance_id"].as_str().unwrap().to_string();
    let other = app
        .get(
            &format!("/api/v1/orchestrator/tasks/{task_id}/status"),
            &bob,
        )
        .await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);

    // The agent routes reach the real agent manager, with ownership checked
    // through the instance's task.
    let status = app
        .get(&format!("/api/v1/agents/{instance}/status"), &alice)
        .await;
    assert_eq!(status.status, StatusCode::OK, "{}", status.body);
    assert_eq!(status.body["task_id"], task_id.as_str());
    assert_eq!(status.body["agent_type"], "mock-agent");
    let theirs = app
        .get(&format!("/api/v1/agents/{instance}/status"), &bob)
        .await;
    assert_eq!(theirs.status, StatusCode::NOT_FOUND);
    let session = app
        .get(&format!("/api/v1/agents/{instance}/session"), &alice)
        .await;
    assert_eq!(session.status, StatusCode::OK, "{}", session.body);
    assert_eq!(session.body["instance_id"], instance.as_str());
    let logs = app
        .get(&format!("/api/v1/agents/{instance}/logs?tail=50"), &alice)
        .await;
    assert_eq!(logs.status, StatusCode::OK, "{}", logs.body);
    assert!(logs.body["lines"].is_array());

    // The run completes; the task service has the state.
    eventually(120, "the task completed", || async {
        let t = app.get(&format!("/api/v1/tasks/{task_id}"), &alice).await;
        (t.body["state"] == "COMPLETED" || t.body["state"] == "REVIEW").then_some(())
    })
    .await;

    // The feed compacted, through the gateway: the task's owner reads its
    // items, from seq 1 to the last stored, the turn's end last; nobody
    // else does.
    let page = app
        .get(
            &format!("/api/v1/orchestrator/tasks/{task_id}/feed"),
            &alice,
        )
        .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let items = page.body["items"].as_array().unwrap();
    assert_eq!(page.body["earliest"], 1, "{}", page.body);
    assert_eq!(page.body["has_more"], false);
    let stored = app
        .get(
            &format!("/api/v1/orchestrator/tasks/{task_id}/status"),
            &alice,
        )
        .await;
    assert_eq!(page.body["covers_to"], stored.body["last_seq"]);
    assert!(
        items.iter().any(|i| i["kind"] == "message"),
        "{}",
        page.body
    );
    assert!(
        items
            .iter()
            .any(|i| i["kind"] == "event" && i["event"]["kind"] == "turn_end"),
        "{}",
        page.body
    );
    let mut next = 1;
    for item in items {
        assert_eq!(item["first_seq"], next, "{item}");
        next = item["last_seq"].as_i64().unwrap() + 1;
    }
    let other = app
        .get(&format!("/api/v1/orchestrator/tasks/{task_id}/feed"), &bob)
        .await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
    let bad = app
        .get(
            &format!("/api/v1/orchestrator/tasks/{task_id}/feed?before=0"),
            &alice,
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.body);
    assert_eq!(bad.error(), "validation_error");

    // The feed through the gateway, token as a subprotocol: stored
    // frames replay from ?after=0, numbered from 1.
    let addr: SocketAddr = stack.gateway.serve();
    let mut req = format!("ws://{addr}/api/v1/orchestrator/tasks/{task_id}/stream?after=0")
        .into_client_request()
        .unwrap();
    req.headers_mut().insert(
        "sec-websocket-protocol",
        format!("kandev.bearer, {alice}").parse().unwrap(),
    );
    let (mut ws, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
    assert_eq!(resp.headers()["sec-websocket-protocol"], "kandev.bearer");
    let first = next_json(&mut ws).await;
    assert_eq!(first["seq"], 1, "{first}");
    assert_eq!(first["task_id"], task_id.as_str());

    // A command from the client reaches the orchestrator; its answer comes
    // back (ack, or an error when no follow-up is possible).
    for (id, text) in [
        ("c-1", "thanks".to_owned()),
        // A command larger than the socket's read buffer is read whole.
        (
            "c-2",
            "more details ".repeat(2 * kandev_common::serve::WS_READ_BUFFER / 13 * 3),
        ),
    ] {
        ws.send(tg::Message::text(
            json!({"type": "prompt", "text": text, "id": id}).to_string(),
        ))
        .await
        .unwrap();
        let answer = loop {
            let frame = next_json(&mut ws).await;
            if frame.get("seq").is_none() {
                break frame;
            }
        };
        assert_eq!(answer["id"], id, "{answer}");
        assert!(
            answer["type"] == "ack" || answer["type"] == "error",
            "{answer}"
        );
    }

    // Admin changes to the registry reach the agent manager.
    let new_type =
        json!({"id": "gw-test-agent", "name": "GW test", "image": "kandev/mock-agent:latest"});
    let made = stack
        .gateway
        .post("/api/v1/agent-types", &admin, new_type)
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.body);
    let patched = stack
        .gateway
        .patch(
            "/api/v1/agent-types/gw-test-agent",
            &admin,
            json!({"description": "patched"}),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.body);
    assert_eq!(patched.body["description"], "patched");
    let disabled = stack
        .gateway
        .post(
            "/api/v1/agent-types/gw-test-agent/disable",
            &admin,
            json!({}),
        )
        .await;
    assert_eq!(disabled.status, StatusCode::OK, "{}", disabled.body);
    assert_eq!(disabled.body["enabled"], false);
    let dup = stack
        .gateway
        .post(
            "/api/v1/agent-types",
            &admin,
            json!({"id": "gw-test-agent", "name": "again", "image": "x"}),
        )
        .await;
    assert_eq!(dup.status, StatusCode::CONFLICT);

    // A gateway that stops closes its streams saying it is going away.
    stack.gateway.shutdown_gateway();
    let close = loop {
        match tokio::time::timeout(std::time::Duration::from_secs(20), ws.next()).await {
            Ok(Some(Ok(tg::Message::Close(frame)))) => break frame,
            Ok(Some(Ok(_))) => {}
            other => panic!("no close frame: {other:?}"),
        }
    };
    assert_eq!(close.map(|f| u16::from(f.code)), Some(1001));
    stack.stop().await;
}

async fn put_secret(app: &TestApp, token: &str, name: &str, value: Value) -> Resp {
    let path = format!("/api/v1/users/me/secrets/{name}");
    app.call(
        axum::http::Method::PUT,
        &path,
        Some(token),
        Some(json!({ "value": value })),
    )
    .await
}

async fn delete_secret(app: &TestApp, token: &str) -> Resp {
    app.call(
        axum::http::Method::DELETE,
        "/api/v1/users/me/secrets/ANTHROPIC_API_KEY",
        Some(token),
        None,
    )
    .await
}

#[tokio::test]
async fn stack_each_user_keeps_their_own_secrets_and_never_reads_a_value_back() {
    let stack = Stack::start().await;
    let app = &stack.gateway;
    let alice = app.token("alice", false);
    let bob = app.token("bob", false);
    let admin = app.token("admin", true);
    let set = eventually(10, "the agent manager answers", || async {
        let r = put_secret(app, &alice, "ANTHROPIC_API_KEY", json!("sk-alice-value")).await;
        (r.status != StatusCode::SERVICE_UNAVAILABLE).then_some(r)
    })
    .await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.body);
    assert_eq!(set.body["name"], "ANTHROPIC_API_KEY");
    assert!(!set.body.to_string().contains("sk-alice-value"));

    let mine = app.get("/api/v1/users/me/secrets", &alice).await;
    assert_eq!(mine.status, StatusCode::OK);
    assert_eq!(mine.body["secrets"][0]["name"], "ANTHROPIC_API_KEY");
    assert!(mine.body["secrets"][0]["updated_at"].is_string());
    assert!(!mine.body.to_string().contains("sk-alice-value"));
    // Not even an admin sees another user's secrets: each list is the
    // caller's own.
    for other in [&bob, &admin] {
        let theirs = app.get("/api/v1/users/me/secrets", other).await;
        assert_eq!(theirs.body["secrets"], json!([]), "{}", theirs.body);
    }

    for (name, value, why) in [
        ("lower-case-dash", json!("v"), "name"),
        ("TASK_DESCRIPTION", json!("v"), "reserved"),
        ("EMPTY", json!(""), "empty"),
        ("NUL", json!("a\u{0}b"), "NUL"),
        ("BIG", json!("v".repeat(16 * 1024 + 1)), "size"),
        ("NUMBER", json!(5), "type"),
    ] {
        let r = put_secret(app, &alice, name, value).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{why}: {}", r.body);
    }
    let anonymous = app
        .call(
            axum::http::Method::GET,
            "/api/v1/users/me/secrets",
            None,
            None,
        )
        .await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);

    assert_eq!(delete_secret(app, &bob).await.status, StatusCode::NOT_FOUND);
    assert_eq!(
        delete_secret(app, &alice).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        delete_secret(app, &alice).await.status,
        StatusCode::NOT_FOUND
    );
    let empty = app.get("/api/v1/users/me/secrets", &alice).await;
    assert_eq!(empty.body["secrets"], json!([]));

    // The operator's credentials are an admin's opt-in per agent type.
    let mock = app.get("/api/v1/agent-types", &alice).await;
    let seeded = mock.body["agent_types"].as_array().unwrap();
    assert!(
        seeded.iter().all(|t| t["host_credentials"] == false),
        "{seeded:?}"
    );
    let opted = app
        .call(
            axum::http::Method::PATCH,
            "/api/v1/agent-types/mock-agent",
            Some(&admin),
            Some(json!({"host_credentials": true})),
        )
        .await;
    assert_eq!(opted.status, StatusCode::OK, "{}", opted.body);
    assert_eq!(opted.body["host_credentials"], true);

    // What a type still needs is counted per caller: a user's own secret
    // fills it for that user only.
    let needy = app
        .post(
            "/api/v1/agent-types",
            &admin,
            json!({"id": "needs-key", "name": "Needs a key", "image": "kandev/mock-agent:latest",
                   "required_env": ["SOME_API_KEY"]}),
        )
        .await;
    assert_eq!(needy.status, StatusCode::CREATED, "{}", needy.body);
    let missing = |resp: &Resp| {
        resp.body["agent_types"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == "needs-key")
            .map(|t| t["missing_env"].clone())
            .unwrap()
    };
    let before = app.get("/api/v1/agent-types", &alice).await;
    assert_eq!(missing(&before), json!(["SOME_API_KEY"]));
    let set = put_secret(app, &alice, "SOME_API_KEY", json!("sk-some")).await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.body);
    let after = app.get("/api/v1/agent-types", &alice).await;
    assert_eq!(missing(&after), json!([]));
    let others = app.get("/api/v1/agent-types", &bob).await;
    assert_eq!(missing(&others), json!(["SOME_API_KEY"]));
    stack.stop().await;
}

/// The environment of the running container of `task_id`'s agent, once
/// there is exactly one.
fn container_env(task_id: &str) -> Option<String> {
    let ps = std::process::Command::new("docker")
        .args([
            "ps",
            "-q",
            "--filter",
            &format!("label=kandev.task_id={task_id}"),
        ])
        .output()
        .expect("docker ps");
    let ids = String::from_utf8_lossy(&ps.stdout).to_string();
    let [id] = ids.lines().collect::<Vec<_>>()[..] else {
        return None;
    };
    let env = std::process::Command::new("docker")
        .args(["inspect", "--format", "{{json .Config.Env}}", id])
        .output()
        .expect("docker inspect");
    Some(String::from_utf8_lossy(&env.stdout).into_owned())
}

/// Issue 37, through REST: (A) a task the admin filed on Bob's board and
/// Bob started runs with Bob's secret, not the admin's, and the API says
/// whose run it is; (B) follow-ups sent while its turn runs are held (issue
/// 40), refused with 429 beyond the cap, and taken again after a cancel
/// (the cancelled turn sends the held ones as the next).
#[tokio::test]
async fn stack_a_run_uses_its_starters_secrets_and_its_follow_ups_are_bounded() {
    const QUEUED: usize = kandev_orchestrator::engine::followups::MAX_HELD_PROMPTS;
    let stack = Stack::start().await;
    let app = &stack.gateway;
    let admin = app.token("admin", true);
    let bob = app.token("bob", false);
    let made = eventually(10, "the agent manager answers", || async {
        let r = app
            .post(
                "/api/v1/agent-types",
                &admin,
                json!({"id": "mock-env", "name": "Mock agent (env)",
                       "image": "kandev/mock-agent:latest", "network_mode": "none",
                       "optional_env": ["RUNNER_TOKEN"]}),
            )
            .await;
        (r.status != StatusCode::SERVICE_UNAVAILABLE).then_some(r)
    })
    .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.body);
    for (token, value) in [(&admin, "admin-own-value"), (&bob, "bob-own-value")] {
        let set = put_secret(app, token, "RUNNER_TOKEN", json!(value)).await;
        assert_eq!(set.status, StatusCode::OK, "{}", set.body);
    }

    // The admin files a task on Bob's board; Bob starts it.
    let board = app.board(&bob, "bob's").await;
    let created = app
        .post(
            &format!("/api/v1/boards/{board}/tasks"),
            &admin,
            json!({"title": "Wait", "description": "scenario: wait-cancel",
                   "agent_type": "mock-env", "max_retries": 0, "autostart": false}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(created.body["created_by"], "admin");
    let task_id = created.body["id"].as_str().unwrap().to_string();
    let start = format!("/api/v1/orchestrator/tasks/{task_id}/start");
    let started = app.post(&start, &bob, json!({})).await;
    assert_eq!(started.status, StatusCode::OK, "{}", started.body);
    assert_eq!(started.body["run_as"], "bob");
    let exec = eventually(120, "a running execution", || async {
        let r = app
            .get(
                &format!("/api/v1/orchestrator/tasks/{task_id}/status"),
                &bob,
            )
            .await;
        (r.body["state"] == "running").then_some(r.body)
    })
    .await;
    assert_eq!(exec["run_as"], "bob");
    let instance = exec["instance_id"].as_str().unwrap().to_string();
    let status = app
        .get(&format!("/api/v1/agents/{instance}/status"), &bob)
        .await;
    assert_eq!(status.body["run_as"], "bob", "{}", status.body);
    let env = eventually(60, "the agent's container", || async {
        container_env(&task_id)
    })
    .await;
    assert!(env.contains("RUNNER_TOKEN=bob-own-value"), "{env}");
    assert!(!env.contains("admin-own-value"), "{env}");

    // The admin may not steer Bob's run, by either route.
    let follow_up = |text: &str| json!({ "prompt": text });
    let theirs = app.post(&start, &admin, follow_up("print env")).await;
    assert_eq!(theirs.status, StatusCode::CONFLICT, "{}", theirs.body);
    let direct = app
        .post(
            &format!("/api/v1/agents/{instance}/prompt"),
            &admin,
            json!({"message": "print env"}),
        )
        .await;
    assert_eq!(direct.status, StatusCode::CONFLICT, "{}", direct.body);

    // Follow-ups mid-turn are held up to the cap; the next is a 429.
    for n in 0..QUEUED {
        let queued = app
            .post(&start, &bob, follow_up(&format!("echo queued {n}")))
            .await;
        assert_eq!(queued.status, StatusCode::OK, "{n}: {}", queued.body);
    }
    let refused = app.post(&start, &bob, follow_up("echo one too many")).await;
    assert_eq!(
        refused.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        refused.body
    );
    assert_eq!(refused.error(), "rate_limited");
    assert!(
        refused.body["message"]
            .as_str()
            .unwrap()
            .contains(&format!("already has {QUEUED} follow-ups waiting")),
        "{}",
        refused.body
    );
    // One follow-up over the body limit never reaches a queue.
    let huge = app
        .post(&start, &bob, follow_up(&"x".repeat(2 * 1024 * 1024)))
        .await;
    assert_eq!(huge.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", huge.body);

    // The cancel ends the turn (the held follow-ups go as the next one): a
    // follow-up is taken again.
    let cancelled = app
        .post(
            &format!("/api/v1/agents/{instance}/cancel"),
            &bob,
            json!({}),
        )
        .await;
    assert_eq!(cancelled.status, StatusCode::OK, "{}", cancelled.body);
    let pending = format!("/api/v1/orchestrator/tasks/{task_id}/pending-prompts");
    eventually(60, "the held follow-ups sent", || async {
        let held = app.get(&pending, &bob).await;
        (held.body["pending_prompts"].as_array().map(Vec::len) == Some(0)).then_some(())
    })
    .await;
    let again = app
        .post(&start, &bob, follow_up("echo after the cancel"))
        .await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    stack.stop().await;
}
