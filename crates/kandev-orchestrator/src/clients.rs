//! The services the orchestrator drives: the agent manager behind the
//! [`AgentControl`] trait (its gRPC implementation is [`GrpcAgentControl`]),
//! and the task service's gRPC client; every call carries the caller's
//! trace context and the service token.

use async_trait::async_trait;
use kandev_common::{
    service_auth::ServiceToken,
    trace::{TracedChannel, traced},
};
use kandev_proto::v1::{
    self as pb, agent_manager_client::AgentManagerClient, task_service_client::TaskServiceClient,
};
use secrecy::SecretString;
use tonic::{Status, transport::Channel};

/// What the orchestrator asks of the agent manager.
#[async_trait]
pub trait AgentControl: Send + Sync + 'static {
    async fn launch(&self, request: pb::LaunchAgentRequest) -> Result<pb::AgentInstance, Status>;
    async fn send_prompt(&self, instance_id: &str, prompt: &str) -> Result<(), Status>;
    async fn cancel(&self, instance_id: &str, reason: &str) -> Result<(), Status>;
    async fn stop(&self, instance_id: &str, reason: &str) -> Result<(), Status>;
    async fn respond_permission(&self, request: pb::RespondPermissionRequest)
    -> Result<(), Status>;
    async fn list_instances(&self, task_id: &str) -> Result<Vec<pb::AgentInstance>, Status>;
    /// Commits (and pushes) the task's work on its branch.
    async fn deliver(&self, request: pb::DeliverChangesRequest) -> Result<pb::Delivery, Status>;
    /// Removes the task's clone; `Ok(false)` when it had none. With
    /// `keep_delivered`, Kandev's repository of a delivered clone stays,
    /// and the delivered change with it (see `RemoveWorkspaceRequest`).
    async fn remove_workspace(&self, task_id: &str, keep_delivered: bool) -> Result<bool, Status>;
    /// The value of the user `scope`'s secret `name` (NOT_FOUND when that
    /// user has none of that name), for a call made on their behalf.
    async fn open_user_secret(&self, scope: &str, name: &str) -> Result<SecretString, Status>;

    /// Whether a run of `agent_type` can be placed now (a pool of managers
    /// may all be full); a queued run waits while it cannot.
    fn has_room(&self, _agent_type: &str) -> bool {
        true
    }

    /// Whether the manager `manager_id` has not been heard from for the
    /// grace: its runs move elsewhere. Never for a single manager.
    fn manager_gone(&self, _manager_id: &str) -> bool {
        false
    }

    /// Managers heard for the first time, or again after being gone, to
    /// reconcile; each once.
    fn take_to_reconcile(&self) -> Vec<String> {
        Vec::new()
    }

    /// Where the manager `manager_id` answers, when known.
    fn manager_url(&self, _manager_id: &str) -> Option<String> {
        None
    }

    /// The active instances of the manager `manager_id`.
    async fn active_on(&self, _manager_id: &str) -> Result<Vec<pb::AgentInstance>, Status> {
        Ok(Vec::new())
    }
}

/// [`AgentControl`] over the agent manager's gRPC API.
#[derive(Clone)]
pub struct GrpcAgentControl {
    client: AgentManagerClient<TracedChannel>,
}

fn lazy_channel(url: &str, token: &ServiceToken) -> Result<TracedChannel, String> {
    Ok(traced(
        Channel::from_shared(url.to_string())
            .map_err(|e| format!("{url}: {e}"))?
            .connect_timeout(std::time::Duration::from_secs(5))
            // The engine waits for these calls; none may hang it for ever.
            .timeout(std::time::Duration::from_secs(120))
            .connect_lazy(),
        token,
    ))
}

impl GrpcAgentControl {
    /// Connects on first use, so the agent manager may start later; every
    /// call carries `token`.
    pub fn lazy(url: &str, token: &ServiceToken) -> Result<Self, String> {
        Ok(GrpcAgentControl {
            client: AgentManagerClient::new(lazy_channel(url, token)?),
        })
    }
}

#[async_trait]
impl AgentControl for GrpcAgentControl {
    async fn launch(&self, request: pb::LaunchAgentRequest) -> Result<pb::AgentInstance, Status> {
        Ok(self
            .client
            .clone()
            .launch_agent(request)
            .await?
            .into_inner())
    }

    async fn send_prompt(&self, instance_id: &str, prompt: &str) -> Result<(), Status> {
        let accepted = self
            .client
            .clone()
            .send_prompt(pb::SendPromptRequest {
                instance_id: instance_id.into(),
                prompt: prompt.into(),
            })
            .await?
            .into_inner()
            .accepted;
        if accepted {
            Ok(())
        } else {
            Err(Status::failed_precondition(
                "the agent did not accept the prompt",
            ))
        }
    }

    async fn cancel(&self, instance_id: &str, reason: &str) -> Result<(), Status> {
        self.client
            .clone()
            .cancel_agent(pb::CancelAgentRequest {
                instance_id: instance_id.into(),
                reason: reason.into(),
            })
            .await?;
        Ok(())
    }

    async fn stop(&self, instance_id: &str, reason: &str) -> Result<(), Status> {
        self.client
            .clone()
            .stop_agent(pb::StopAgentRequest {
                instance_id: instance_id.into(),
                reason: reason.into(),
            })
            .await?;
        Ok(())
    }

    async fn respond_permission(
        &self,
        request: pb::RespondPermissionRequest,
    ) -> Result<(), Status> {
        self.client.clone().respond_permission(request).await?;
        Ok(())
    }

    async fn list_instances(&self, task_id: &str) -> Result<Vec<pb::AgentInstance>, Status> {
        Ok(self
            .client
            .clone()
            .list_instances(pb::ListInstancesRequest {
                task_id: task_id.into(),
                active_only: false,
            })
            .await?
            .into_inner()
            .instances)
    }

    async fn deliver(&self, request: pb::DeliverChangesRequest) -> Result<pb::Delivery, Status> {
        Ok(self
            .client
            .clone()
            .deliver_changes(request)
            .await?
            .into_inner())
    }

    async fn remove_workspace(&self, task_id: &str, keep_delivered: bool) -> Result<bool, Status> {
        Ok(self
            .client
            .clone()
            .remove_workspace(pb::RemoveWorkspaceRequest {
                task_id: task_id.into(),
                keep_delivered,
            })
            .await?
            .into_inner()
            .removed)
    }

    async fn open_user_secret(&self, scope: &str, name: &str) -> Result<SecretString, Status> {
        let opened = self
            .client
            .clone()
            .open_user_secret(pb::OpenUserSecretRequest {
                scope: scope.into(),
                name: name.into(),
            })
            .await?
            .into_inner();
        Ok(SecretString::from(opened.value))
    }

    async fn active_on(&self, _manager_id: &str) -> Result<Vec<pb::AgentInstance>, Status> {
        Ok(self
            .client
            .clone()
            .list_instances(pb::ListInstancesRequest {
                task_id: String::new(),
                active_only: true,
            })
            .await?
            .into_inner()
            .instances)
    }
}

/// A lazily connecting task service client; every call carries `token`.
pub fn task_client(
    url: &str,
    token: &ServiceToken,
) -> Result<TaskServiceClient<TracedChannel>, String> {
    Ok(TaskServiceClient::new(lazy_channel(url, token)?))
}
