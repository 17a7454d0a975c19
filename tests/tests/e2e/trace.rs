//! One task is one trace: the `traceparent` sent with the REST call that
//! creates a task is continued by all four services (their log lines name
//! it, and their spans reach an OTLP collector when one is configured), and
//! travels in the NATS headers of the task's events and ACP messages.

use std::{
    collections::BTreeSet,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use kandev_e2e::{Options, Stack, Svc, eventually, serde_json::json};
use opentelemetry_proto::tonic::{
    collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
        trace_service_server::{TraceService, TraceServiceServer},
    },
    common::v1::any_value,
};
use tonic::codegen::async_trait;

const TRACE_ID: &str = "5b8efff798038103d269b633813fc60c";

/// An OTLP/gRPC collector that keeps `(service.name, trace id)` of every
/// span it is sent.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<(String, String)>>>,
}

#[async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for resource_spans in request.into_inner().resource_spans {
            let service = resource_spans
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                    any_value::Value::StringValue(s) => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    let id: String = span.trace_id.iter().map(|b| format!("{b:02x}")).collect();
                    spans.push((service.clone(), id));
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

impl Collector {
    /// The services that sent a span of `trace_id`.
    fn services_in(&self, trace_id: &str) -> BTreeSet<String> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, id)| id == trace_id)
            .map(|(service, _)| service.clone())
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_one_trace_across_the_services_and_the_bus() {
    let collector = Collector::default();
    let addr = SocketAddr::from(([127, 0, 0, 1], kandev_testkit::free_port()));
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector.clone()))
            .serve(addr),
    );
    let endpoint = format!("http://{addr}");
    let env = Svc::ALL
        .iter()
        .map(|svc| {
            (
                *svc,
                "KANDEV_LOG__OTLP_ENDPOINT".to_string(),
                endpoint.clone(),
            )
        })
        .collect();
    let stack = Stack::start(
        "trace",
        Options {
            env,
            ..Options::default()
        },
    )
    .await;
    let api = stack.admin().await;
    let board = api.board("traced").await;
    let repo = stack.git_repo("traced");
    let traceparent = format!("00-{TRACE_ID}-b7ad6b7169203331-01");
    let created = api
        .try_send_with(
            "POST",
            &format!("/api/v1/boards/{board}/tasks"),
            Some(
                json!({"title": "Traced", "description": "scenario: code",
                       "agent_type": "mock-agent", "repository_url": repo, "max_retries": 0})
                .to_string(),
            ),
            &[("traceparent", traceparent.as_str())],
        )
        .await
        .expect("gateway answers");
    assert_eq!(created.status, 201, "{}", created.body);
    let task = created.body["id"].as_str().unwrap().to_string();
    api.wait_state(&task, &["COMPLETED"], 180).await;

    // Every service logged a line of that trace: the gateway and the task
    // service while creating the task, the orchestrator queueing and
    // launching it, the agent manager running it.
    for svc in Svc::ALL {
        let log = stack.log(svc);
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(TRACE_ID)).collect();
        assert!(
            !lines.is_empty(),
            "{svc:?} logged nothing of trace {TRACE_ID}:\n{log}"
        );
    }
    let orchestrator = stack.log(Svc::Orchestrator);
    for what in ["task queued", "agent launched", "run completed"] {
        assert!(
            orchestrator
                .lines()
                .any(|l| l.contains(what) && l.contains(TRACE_ID)),
            "the orchestrator's {what:?} line is not in the trace:\n{orchestrator}"
        );
    }

    // The bus carried the trace: the task's event and its ACP messages.
    // The tests' own NATS user: the services' may not read the streams.
    let js = stack.jetstream().await;
    for (stream, subject) in [
        ("KANDEV_TASKS", "task.created".to_string()),
        ("KANDEV_AGENTS", "agent.completed".to_string()),
        ("KANDEV_ACP", format!("acp.message.{task}")),
    ] {
        let message = js
            .get_stream(stream)
            .await
            .unwrap()
            .get_last_raw_message_by_subject(&subject)
            .await
            .unwrap_or_else(|e| panic!("no {subject}: {e}"));
        let sent = message
            .headers
            .get("traceparent")
            .map(|v| v.as_str().to_string())
            .unwrap_or_default();
        assert!(
            sent.starts_with(&format!("00-{TRACE_ID}-")),
            "{subject} carries traceparent {sent:?}"
        );
    }

    // The spans reached the collector (one setting turns export on), from
    // all four services, in one trace.
    let services = eventually(60, "spans of the trace from every service", || {
        let services = collector.services_in(TRACE_ID);
        async move { (services.len() == 4).then_some(services) }
    })
    .await;
    assert_eq!(
        services,
        ["agent-manager", "gateway", "orchestrator", "task-service"]
            .map(String::from)
            .into(),
    );
    stack.stop().await;
    server.abort();
}
