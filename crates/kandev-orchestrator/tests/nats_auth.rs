//! NATS under `deploy/nats/nats.conf` (the file itself, with passwords of
//! the test's own): a connection without credentials is refused, each
//! service's user can do what its code does (streams, publishing, the
//! orchestrator's durable consumers and acknowledgements, the live feed),
//! and every user is refused the subjects of the others.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use kandev_events::{
    BusError, EventBus, JetStreamBus, NatsLogin,
    durable::{AckMode, JetStreamStreams, Streams},
    nats::{self, NatsPassword},
    subjects,
};
use kandev_testkit::{OwnNats, eventually, nats_raw};
use uuid::Uuid;

fn login(nats: &OwnNats, user: &str) -> NatsLogin {
    NatsLogin::new(
        format!("kandev-{user}"),
        Some(user.to_string()),
        Some(NatsPassword::from(nats.password(user))),
    )
}

async fn bus_as(nats: &OwnNats, user: &str) -> JetStreamBus {
    let bus = JetStreamBus::connect_as(&nats.url(), &login(nats, user))
        .await
        .unwrap_or_else(|e| panic!("{user} connects: {e}"));
    bus.ensure_streams()
        .await
        .unwrap_or_else(|e| panic!("{user} sets up the streams: {e}"));
    bus
}

#[tokio::test]
async fn a_connection_without_credentials_is_refused() {
    let nats = OwnNats::start_with_auth().await;

    // On the wire: no user, no session.
    let answers = nats_raw(nats.port, None, &["SUB > 1"]).await;
    assert!(
        answers
            .iter()
            .any(|a| a.contains("Authorization Violation")),
        "{answers:?}"
    );
    // A wrong password either.
    let answers = nats_raw(nats.port, Some(("gateway", "not-the-password")), &[]).await;
    assert!(
        answers
            .iter()
            .any(|a| a.contains("Authorization Violation")),
        "{answers:?}"
    );

    // The tests' own user (not in the deployed file) looks into streams.
    let (user, password) = nats.admin_credentials();
    let admin = async_nats::ConnectOptions::with_user_and_password(user, password)
        .connect(nats.url())
        .await
        .expect("the tests' admin user connects");
    admin.flush().await.expect("flush");

    // The services' connect says so at once instead of retrying forever.
    let anonymous = tokio::time::timeout(
        Duration::from_secs(10),
        JetStreamBus::connect_as(&nats.url(), &NatsLogin::anonymous("kandev-test")),
    )
    .await
    .expect("refused at once, not retried");
    assert!(
        matches!(anonymous, Err(BusError::Refused { .. })),
        "{anonymous:?}"
    );
    let wrong = NatsLogin::new(
        "kandev-orchestrator",
        Some("orchestrator".into()),
        Some("wrong".into()),
    );
    let err = JetStreamBus::connect_as(&nats.url(), &wrong)
        .await
        .expect_err("a wrong password is refused");
    let text = err.to_string();
    assert!(
        text.contains("refused user \"orchestrator\"") && text.contains("KANDEV_NATS_PASSWORD"),
        "{text}"
    );

    // The orchestrator itself does not start without its credentials.
    let settings = kandev_orchestrator::Settings {
        common: kandev_common::config::ServiceSettings {
            listen_addr: "127.0.0.1:0".into(),
            nats_url: nats.url(),
            service_token: Some(kandev_testkit::SERVICE_TOKEN.into()),
            ..kandev_orchestrator::Settings::default().common
        },
        ..Default::default()
    };
    let start = tokio::time::timeout(
        Duration::from_secs(10),
        kandev_orchestrator::Application::build(settings),
    )
    .await
    .expect("a refused start ends at once");
    let Err(err) = start else {
        panic!("the orchestrator started without NATS credentials");
    };
    assert!(err.to_string().contains("KANDEV_NATS_USER"), "{err}");
}

#[tokio::test]
async fn each_service_user_can_do_what_its_service_does() {
    let nats = OwnNats::start_with_auth().await;
    let task_id = Uuid::new_v4();

    // Task service: the streams, then task events (the outbox's publish).
    let tasks = bus_as(&nats, "task-service").await;
    tasks
        .publish(subjects::TASK_CREATED, Uuid::new_v4(), Bytes::from("{}"))
        .await
        .expect("the task service publishes task events");

    // Agent manager: agent events, ACP messages, and the last one it
    // published (where it resumes after a restart).
    let agents = bus_as(&nats, "agent-manager").await;
    agents
        .publish(subjects::AGENT_STARTED, Uuid::new_v4(), Bytes::from("{}"))
        .await
        .expect("the agent manager publishes agent events");
    let acp = subjects::acp_message(&task_id);
    agents
        .publish(&acp, Uuid::new_v4(), Bytes::from("{\"n\":1}"))
        .await
        .expect("the agent manager publishes ACP messages");
    let last = agents.last_message(&acp).await.expect("last message");
    assert_eq!(last, Some(Bytes::from("{\"n\":1}")));

    // Orchestrator: the feed's consumer, created and then re-created at its
    // ack floor (the code the feed runs), pulling and acknowledging.
    let orch = bus_as(&nats, "orchestrator").await;
    let streams = JetStreamStreams::new(orch.clone());
    let open = || {
        streams.consumer(
            kandev_orchestrator::feed::ACP_STREAM,
            "orchestrator-acp",
            "acp.message.>",
            AckMode::All,
        )
    };
    for _ in 0..2 {
        let consumer = open()
            .await
            .expect("the orchestrator creates the ACP consumer");
        drop(consumer);
    }
    let mut consumer = open().await.expect("ACP consumer");
    let fetched = consumer
        .fetch(10, 1 << 20, Duration::from_secs(10))
        .await
        .expect("the orchestrator pulls");
    let msg = fetched.first().expect("a message within 10 s");
    assert_eq!(msg.subject.as_str(), acp);
    msg.ack().await.expect("ack sent");
    let stream = orch
        .jetstream()
        .get_stream(kandev_orchestrator::feed::ACP_STREAM)
        .await
        .expect("stream info");
    eventually(10, "the acknowledgement to land", || {
        let stream = stream.clone();
        async move {
            let info = stream.consumer_info("orchestrator-acp").await.ok()?;
            (info.ack_floor.stream_sequence >= 1).then_some(())
        }
    })
    .await;
    // Its task and agent consumers (the settings' defaults).
    for (stream, durable, filter, subject) in [
        (
            "KANDEV_TASKS",
            "orchestrator-tasks",
            "task.>",
            subjects::TASK_CREATED,
        ),
        (
            "KANDEV_AGENTS",
            "orchestrator-agents",
            "agent.>",
            subjects::AGENT_STARTED,
        ),
    ] {
        // Opened twice: the second re-creates it at its ack floor.
        for _ in 0..2 {
            drop(
                streams
                    .consumer(stream, durable, filter, AckMode::Explicit)
                    .await
                    .unwrap_or_else(|e| panic!("the orchestrator opens {durable}: {e}")),
            );
        }
        let mut consumer = streams
            .consumer(stream, durable, filter, AckMode::Explicit)
            .await
            .expect("consumer");
        let fetched = consumer
            .fetch(1, 1 << 20, Duration::from_secs(10))
            .await
            .expect("pull");
        let msg = fetched.first().expect("an event within 10 s");
        assert_eq!(msg.subject.as_str(), subject);
        msg.ack().await.expect("ack");
    }

    // Gateway: the live feed the orchestrator broadcasts.
    let gateway = nats::connect(&nats.url(), &login(&nats, "gateway"), |_| {})
        .await
        .expect("the gateway connects");
    let mut live = gateway
        .subscribe(subjects::feed_live(&task_id))
        .await
        .expect("subscribe");
    // Live frames are at most once, and the subscription reaches the server
    // in its own time: publish until one arrives.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let frame = loop {
        orch.client()
            .publish(subjects::feed_live(&task_id), Bytes::from("frame"))
            .await
            .expect("the orchestrator publishes the live feed");
        if let Ok(Some(frame)) = tokio::time::timeout(Duration::from_millis(200), live.next()).await
        {
            break frame;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the gateway got no live frame within 10 s"
        );
    };
    assert_eq!(frame.payload, Bytes::from("frame"));
}

/// What a user is refused: each operation is answered `-ERR 'Permissions
/// Violation ...'`, and the control operations `+OK`.
async fn assert_refused(nats: &OwnNats, user: &str, allowed: &[&str], refused: &[&str]) {
    let password = nats.password(user);
    for op in allowed {
        let answers = nats_raw(nats.port, Some((user, &password)), &[op]).await;
        assert_eq!(
            answers,
            vec!["+OK", "+OK"],
            "{user} should be allowed {op:?}: {answers:?}"
        );
    }
    for op in refused {
        let answers = nats_raw(nats.port, Some((user, &password)), &[op]).await;
        assert!(
            answers.iter().any(|a| a.contains("Permissions Violation")),
            "{user} should be refused {op:?}: {answers:?}"
        );
    }
}

fn publish(subject: &str) -> String {
    format!("PUB {subject} 2\r\n{{}}")
}

fn subscribe(subject: &str) -> String {
    format!("SUB {subject} 1")
}

fn s(ops: &[String]) -> Vec<&str> {
    ops.iter().map(String::as_str).collect()
}

#[tokio::test]
async fn each_user_is_refused_the_subjects_of_the_others() {
    let nats = OwnNats::start_with_auth().await;
    let task = Uuid::new_v4();
    let acp = subjects::acp_message(&task);
    let feed = subjects::feed_live(&task);
    let board = subjects::board_live(&Uuid::new_v4());

    let gateway_ok = [subscribe(&feed), subscribe(&board)];
    let gateway_refused = [
        publish("task.created"),
        publish(&acp),
        publish(&feed),
        publish(&board),
        publish("$JS.API.STREAM.INFO.KANDEV_TASKS"),
        subscribe("acp.message.>"),
        subscribe("task.>"),
        subscribe("agent.>"),
        subscribe(">"),
        subscribe("_INBOX.>"),
    ];
    let task_service_ok = [
        publish("task.created"),
        subscribe("_INBOX.kandev-task-service.x"),
    ];
    let task_service_refused = [
        publish("agent.completed"),
        publish(&acp),
        publish(&feed),
        publish("$JS.API.STREAM.DELETE.KANDEV_TASKS"),
        publish("$JS.API.CONSUMER.MSG.NEXT.KANDEV_TASKS.orchestrator-tasks"),
        subscribe("task.>"),
        subscribe("acp.message.>"),
        subscribe("_INBOX.kandev-orchestrator.>"),
    ];
    let agent_manager_ok = [
        publish("agent.completed"),
        publish(&acp),
        subscribe("_INBOX.kandev-agent-manager.x"),
    ];
    let agent_manager_refused = [
        publish("task.state_changed"),
        publish(&feed),
        publish(&board),
        publish("$JS.API.STREAM.MSG.GET.KANDEV_TASKS"),
        publish("$JS.API.CONSUMER.MSG.NEXT.KANDEV_ACP.orchestrator-acp"),
        subscribe("acp.message.>"),
        subscribe("feed.*"),
    ];
    let orchestrator_ok = [
        publish(&feed),
        publish(&board),
        publish("$JS.API.CONSUMER.MSG.NEXT.KANDEV_ACP.orchestrator-acp"),
        subscribe("_INBOX.kandev-orchestrator.x"),
    ];
    let orchestrator_refused = [
        publish("task.created"),
        publish("agent.completed"),
        publish(&acp),
        publish("$JS.API.STREAM.DELETE.KANDEV_ACP"),
        publish("$JS.API.STREAM.PURGE.KANDEV_TASKS"),
        subscribe("acp.message.>"),
        subscribe("feed.*"),
        subscribe("_INBOX.>"),
    ];
    assert_refused(&nats, "gateway", &s(&gateway_ok), &s(&gateway_refused)).await;
    assert_refused(
        &nats,
        "task-service",
        &s(&task_service_ok),
        &s(&task_service_refused),
    )
    .await;
    assert_refused(
        &nats,
        "agent-manager",
        &s(&agent_manager_ok),
        &s(&agent_manager_refused),
    )
    .await;
    assert_refused(
        &nats,
        "orchestrator",
        &s(&orchestrator_ok),
        &s(&orchestrator_refused),
    )
    .await;

    // Through the bus, a refused publish is an error, never a silent loss.
    let tasks = bus_as(&nats, "task-service").await;
    let refused = tasks
        .publish(subjects::AGENT_COMPLETED, Uuid::new_v4(), Bytes::from("{}"))
        .await;
    assert!(refused.is_err(), "{refused:?}");
}
