//! Lazily connected gRPC clients of the three services, with connect and
//! call timeouts, the caller's trace context and the service token, and
//! their readiness checks (the health service, which needs no token); and
//! a call's answer as the API's ([`Answer`], with each service's error
//! mapping: [`task_err`], [`agent_err`], [`orch_err`]).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use kandev_common::{
    service_auth::ServiceToken,
    trace::{TracedChannel, traced},
};
use kandev_proto::v1::{
    agent_manager_client::AgentManagerClient, orchestrator_client::OrchestratorClient,
    task_service_client::TaskServiceClient,
};
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

use crate::{config::Settings, error::ApiError};

/// The names used in error messages and readiness output.
pub const TASK_SERVICE: &str = "task service";
pub const AGENT_MANAGER: &str = "agent manager";
pub const ORCHESTRATOR: &str = "orchestrator";

/// A client of the task service.
pub type TaskService = TaskServiceClient<TracedChannel>;
/// A client of an agent manager.
pub type AgentManager = AgentManagerClient<TracedChannel>;
/// A client of the orchestrator.
pub type Orchestrator = OrchestratorClient<TracedChannel>;

/// Maps a task service error.
pub fn task_err(status: tonic::Status) -> ApiError {
    ApiError::from_status(TASK_SERVICE, status)
}

/// Maps an agent manager error.
pub fn agent_err(status: tonic::Status) -> ApiError {
    ApiError::from_status(AGENT_MANAGER, status)
}

/// Maps an orchestrator error.
pub fn orch_err(status: tonic::Status) -> ApiError {
    ApiError::from_status(ORCHESTRATOR, status)
}

/// A downstream call's answer: `call.await.answer(task_err)?` is the
/// message, or the service's status as the API's error.
pub trait Answer<T> {
    /// The answer's message, or `err` of its status.
    fn answer(self, err: impl FnOnce(tonic::Status) -> ApiError) -> Result<T, ApiError>;
}

impl<T> Answer<T> for Result<tonic::Response<T>, tonic::Status> {
    fn answer(self, err: impl FnOnce(tonic::Status) -> ApiError) -> Result<T, ApiError> {
        self.map(tonic::Response::into_inner).map_err(err)
    }
}

/// Clients of the services; cheap to clone (channels are shared).
#[derive(Debug, Clone)]
pub struct Downstream {
    pub tasks: TaskService,
    pub agents: AgentManager,
    pub orchestrator: Orchestrator,
    channels: [(&'static str, Channel); 3],
    pub connect_timeout: Duration,
    /// Agent managers of the pool other than `agents`, by URL.
    pool: Arc<Mutex<HashMap<String, AgentManagerClient<TracedChannel>>>>,
    token: ServiceToken,
    call_timeout: Duration,
}

fn channel(url: &str, settings: &Settings) -> Result<Channel, tonic::transport::Error> {
    lazy(
        url,
        Duration::from_millis(settings.downstream_connect_timeout_ms),
        Duration::from_millis(settings.downstream_timeout_ms),
    )
}

fn lazy(url: &str, connect: Duration, call: Duration) -> Result<Channel, tonic::transport::Error> {
    Ok(Endpoint::from_shared(url.to_string())?
        .connect_timeout(connect)
        .timeout(call)
        .connect_lazy())
}

/// Pool members kept at once; more are dropped and made again.
const POOL_CLIENTS: usize = 64;

impl Downstream {
    /// Clients for the configured endpoints, each call carrying `token`;
    /// nothing connects until used.
    pub fn new(settings: &Settings, token: &ServiceToken) -> Result<Self, tonic::transport::Error> {
        let tasks = channel(&settings.task_service_url, settings)?;
        let agents = channel(&settings.agent_manager_url, settings)?;
        let orchestrator = channel(&settings.orchestrator_url, settings)?;
        Ok(Downstream {
            tasks: TaskServiceClient::new(traced(tasks.clone(), token)),
            agents: AgentManagerClient::new(traced(agents.clone(), token)),
            orchestrator: OrchestratorClient::new(traced(orchestrator.clone(), token)),
            channels: [
                (TASK_SERVICE, tasks),
                (AGENT_MANAGER, agents),
                (ORCHESTRATOR, orchestrator),
            ],
            connect_timeout: Duration::from_millis(settings.downstream_connect_timeout_ms),
            pool: Arc::default(),
            token: token.clone(),
            call_timeout: Duration::from_millis(settings.downstream_timeout_ms),
        })
    }

    /// The agent manager at `url` (one of the pool, as the orchestrator
    /// reports where a task ran), or the configured one for an empty URL.
    pub fn agents_at(&self, url: &str) -> AgentManagerClient<TracedChannel> {
        if url.is_empty() {
            return self.agents.clone();
        }
        let mut pool = kandev_common::sync::lock(&self.pool);
        if let Some(client) = pool.get(url) {
            return client.clone();
        }
        match lazy(url, self.connect_timeout, self.call_timeout) {
            Ok(channel) => {
                if pool.len() >= POOL_CLIENTS {
                    pool.clear();
                }
                let client = AgentManagerClient::new(traced(channel, &self.token));
                pool.insert(url.to_string(), client.clone());
                client
            }
            Err(err) => {
                tracing::warn!(%url, %err, "an agent manager's URL is not usable; using the configured one");
                self.agents.clone()
            }
        }
    }

    /// Each service's channel, for readiness checks.
    pub fn channels(&self) -> &[(&'static str, Channel)] {
        &self.channels
    }
}

/// Asks a service's standard gRPC health endpoint whether it is serving.
pub async fn check_health(channel: Channel, within: Duration) -> Result<(), String> {
    let mut client = HealthClient::new(channel);
    let call = client.check(HealthCheckRequest {
        service: String::new(),
    });
    match tokio::time::timeout(within, call).await {
        Err(_) => Err("timed out".into()),
        Ok(Err(status)) => Err(format!("unreachable ({})", status.code())),
        Ok(Ok(resp)) if resp.get_ref().status == ServingStatus::Serving as i32 => Ok(()),
        Ok(Ok(_)) => Err("not serving".into()),
    }
}
