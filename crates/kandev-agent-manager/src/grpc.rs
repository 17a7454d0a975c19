//! The gRPC adapter: parse the request, call the [`AgentManager`], convert
//! the result. No logic of its own.

use std::{collections::BTreeMap, path::Path};

use kandev_acp::PermissionDecision;
use kandev_common::ServiceError;
use kandev_proto::{
    time::from_chrono,
    v1::{self as pb, agent_manager_server::AgentManager as AgentManagerRpc},
};
use tonic::{Request, Response, Status};
use tracing::Instrument as _;

use crate::{
    changes,
    config::Settings,
    credentials::SecretEntry,
    delivery,
    domain::{
        AgentError, AgentInstance, AgentType, CredentialMounts, InstanceStatus,
        PermissionPolicyKind, invalid, parse_id,
    },
    images::ImageStatus,
    manager::{AgentManager, LaunchRequest},
    preflight::{self, Problem},
    profiles,
    workspace::WorkspaceSource,
};

/// Serves `kandev.v1.AgentManager` over an [`AgentManager`].
pub struct GrpcAgentAdapter {
    manager: AgentManager,
}

impl GrpcAgentAdapter {
    fn manager_id(&self) -> &str {
        &self.manager.settings().manager_id
    }

    pub fn new(manager: AgentManager) -> Self {
        GrpcAgentAdapter { manager }
    }

    /// The type as served, with where its image stands.
    async fn served_type(&self, t: AgentType) -> pb::AgentType {
        let (image, seconds) = self.manager.image_status(&t.image).await;
        let mut served = type_to_proto(t, self.manager.settings());
        served.image_status = image.as_str().to_string();
        served.image_build_seconds = seconds;
        if let ImageStatus::Failed { error } = image {
            served.image_error = Some(error);
        }
        served
    }
}

fn status(err: AgentError) -> Status {
    err.to_status()
}

fn status_to_proto(s: InstanceStatus) -> pb::AgentStatus {
    match s {
        InstanceStatus::Pending => pb::AgentStatus::Pending,
        InstanceStatus::Starting => pb::AgentStatus::Starting,
        InstanceStatus::Running => pb::AgentStatus::Running,
        InstanceStatus::Completed => pb::AgentStatus::Completed,
        InstanceStatus::Failed => pb::AgentStatus::Failed,
        InstanceStatus::Stopped => pb::AgentStatus::Stopped,
    }
}

fn instance_to_proto(i: AgentInstance, manager_id: &str) -> pb::AgentInstance {
    pb::AgentInstance {
        manager_id: manager_id.to_string(),
        id: i.id.to_string(),
        task_id: i.task_id.to_string(),
        agent_type: i.agent_type,
        container_id: i.container_id,
        status: status_to_proto(i.status) as i32,
        started_at: i.started_at.map(from_chrono),
        finished_at: i.finished_at.map(from_chrono),
        exit_code: i.exit_code,
        error: i.error,
        acp_session_id: i.acp_session_id,
        progress: i.progress,
        stop_reason: i.stop_reason,
        last_seq: i.last_seq,
        priority: i.priority,
        metadata_json: serde_json::Value::Object(i.metadata).to_string(),
        run_as: i.home_scope,
    }
}

/// The type as served; `missing_env` says which of its required variables
/// the manager has no value for (each user may still set them as secrets).
fn type_to_proto(t: AgentType, settings: &Settings) -> pb::AgentType {
    let missing_env = t
        .required_env
        .iter()
        .filter(|name| {
            settings.agent_env_value(name).is_none()
                && !(t.host_credentials && settings.host_env_value(name).is_some())
        })
        .cloned()
        .collect();
    pb::AgentType {
        missing_env,
        internal: t.internal,
        host_credentials: t.host_credentials,
        id: t.id,
        name: t.name,
        description: t.description,
        image: t.image,
        command: t.command,
        working_dir: t.working_dir,
        memory_mb: t.memory_mb,
        cpu_cores: t.cpu_cores,
        pids_limit: t.pids_limit,
        timeout_seconds: t.timeout_seconds,
        capabilities: t.capabilities,
        required_env: t.required_env,
        optional_env: t.optional_env,
        credential_mounts: Some(pb::CredentialMounts {
            ssh: t.credential_mounts.ssh,
            gitconfig: t.credential_mounts.gitconfig,
            git_credentials: t.credential_mounts.git_credentials,
        }),
        network_mode: t.network_mode,
        permission_policy: t.permission_policy.as_str().to_string(),
        enabled: t.enabled,
        home_volume: t.home_volume,
        state_paths: t.state_paths,
        ..Default::default()
    }
}

fn type_from_proto(t: pb::AgentType) -> Result<AgentType, AgentError> {
    let mounts = t.credential_mounts.unwrap_or_default();
    let or = |v: String, d: &str| {
        if v.trim().is_empty() {
            d.to_string()
        } else {
            v
        }
    };
    Ok(AgentType {
        id: t.id.trim().to_string(),
        name: t.name,
        description: t.description,
        image: t.image.trim().to_string(),
        command: t.command,
        working_dir: or(t.working_dir, "/workspace"),
        memory_mb: if t.memory_mb == 0 { 2048 } else { t.memory_mb },
        cpu_cores: if t.cpu_cores == 0.0 { 1.0 } else { t.cpu_cores },
        pids_limit: if t.pids_limit == 0 { 512 } else { t.pids_limit },
        timeout_seconds: if t.timeout_seconds == 0 {
            3600
        } else {
            t.timeout_seconds
        },
        capabilities: t.capabilities,
        required_env: t.required_env,
        optional_env: t.optional_env,
        credential_mounts: CredentialMounts {
            ssh: mounts.ssh,
            gitconfig: mounts.gitconfig,
            git_credentials: mounts.git_credentials,
        },
        network_mode: or(t.network_mode, "none"),
        permission_policy: PermissionPolicyKind::parse(&or(t.permission_policy, "auto_approve"))?,
        enabled: t.enabled,
        home_volume: t.home_volume.trim().to_string(),
        state_paths: t.state_paths,
        internal: t.internal,
        host_credentials: t.host_credentials,
    })
}

/// The launch's metadata: a JSON object, or nothing.
fn launch_metadata(json: &str) -> Result<serde_json::Map<String, serde_json::Value>, AgentError> {
    if json.trim().is_empty() {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_str(json) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err(AgentError::InvalidArgument(
            "metadata_json must be a JSON object".into(),
        )),
        Err(err) => Err(AgentError::InvalidArgument(format!(
            "metadata_json is not JSON: {err}"
        ))),
    }
}

fn launch_request(r: pb::LaunchAgentRequest) -> Result<LaunchRequest, AgentError> {
    use pb::launch_agent_request::Workspace;
    let workspace = match r.workspace {
        Some(Workspace::Repository(g)) => WorkspaceSource::Git {
            url: g.repository_url,
            branch: g.branch,
            title: g.title,
        },
        Some(Workspace::WorkspacePath(p)) if !p.trim().is_empty() => WorkspaceSource::Path(p),
        _ => WorkspaceSource::Empty,
    };
    Ok(LaunchRequest {
        task_id: parse_id("task_id", &r.task_id)?,
        agent_type: r.agent_type.trim().to_string(),
        workspace,
        env: r.env.into_iter().collect::<BTreeMap<_, _>>(),
        prompt: r.prompt,
        resume_session_id: r.resume_session_id.filter(|s| !s.trim().is_empty()),
        priority: r.priority,
        metadata: launch_metadata(&r.metadata_json)?,
        home_scope: r.home_scope,
        fill_diff: r.fill_diff,
    })
}

#[tonic::async_trait]
impl AgentManagerRpc for GrpcAgentAdapter {
    async fn launch_agent(
        &self,
        request: Request<pb::LaunchAgentRequest>,
    ) -> Result<Response<pb::AgentInstance>, Status> {
        let launch = launch_request(request.into_inner()).map_err(status)?;
        // A launch finishes even when its caller goes away mid-way (an
        // orchestrator killed, a timeout): cut short, it would leave an
        // instance pending for ever, which the caller's successor adopts.
        let manager = self.manager.clone();
        let launched = tokio::spawn(
            async move { manager.launch(launch).await }.instrument(tracing::Span::current()),
        );
        let instance = launched
            .await
            .map_err(|e| Status::internal(format!("the launch failed: {e}")))?
            .map_err(status)?;
        Ok(Response::new(instance_to_proto(
            instance,
            self.manager_id(),
        )))
    }

    async fn send_prompt(
        &self,
        request: Request<pb::SendPromptRequest>,
    ) -> Result<Response<pb::SendPromptResponse>, Status> {
        let r = request.into_inner();
        let id = parse_id("instance_id", &r.instance_id).map_err(status)?;
        self.manager
            .send_prompt(id, r.prompt)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::SendPromptResponse { accepted: true }))
    }

    async fn cancel_agent(
        &self,
        request: Request<pb::CancelAgentRequest>,
    ) -> Result<Response<pb::CancelAgentResponse>, Status> {
        let id = parse_id("instance_id", &request.into_inner().instance_id).map_err(status)?;
        let cancelled = self.manager.cancel(id).await.map_err(status)?;
        Ok(Response::new(pb::CancelAgentResponse { cancelled }))
    }

    async fn stop_agent(
        &self,
        request: Request<pb::StopAgentRequest>,
    ) -> Result<Response<pb::StopAgentResponse>, Status> {
        let r = request.into_inner();
        let id = parse_id("instance_id", &r.instance_id).map_err(status)?;
        let instance = self.manager.stop(id, &r.reason).await.map_err(status)?;
        Ok(Response::new(pb::StopAgentResponse {
            instance: Some(instance_to_proto(instance, self.manager_id())),
        }))
    }

    async fn get_status(
        &self,
        request: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::AgentInstance>, Status> {
        let id = parse_id("instance_id", &request.into_inner().instance_id).map_err(status)?;
        let instance = self.manager.get_instance(id).await.map_err(status)?;
        Ok(Response::new(instance_to_proto(
            instance,
            self.manager_id(),
        )))
    }

    async fn get_logs(
        &self,
        request: Request<pb::GetLogsRequest>,
    ) -> Result<Response<pb::GetLogsResponse>, Status> {
        let r = request.into_inner();
        let id = parse_id("instance_id", &r.instance_id).map_err(status)?;
        let lines = self
            .manager
            .logs(id, i64::from(r.tail))
            .await
            .map_err(status)?;
        Ok(Response::new(pb::GetLogsResponse {
            lines: lines
                .into_iter()
                .map(|l| pb::LogLine {
                    timestamp: Some(from_chrono(l.at)),
                    stream: l.stream,
                    line: l.line,
                })
                .collect(),
        }))
    }

    async fn get_session(
        &self,
        request: Request<pb::GetSessionRequest>,
    ) -> Result<Response<pb::AgentSession>, Status> {
        let id = parse_id("instance_id", &request.into_inner().instance_id).map_err(status)?;
        let i = self.manager.get_instance(id).await.map_err(status)?;
        Ok(Response::new(pb::AgentSession {
            instance_id: i.id.to_string(),
            task_id: i.task_id.to_string(),
            session_id: i.acp_session_id,
            status: status_to_proto(i.status) as i32,
        }))
    }

    async fn list_instances(
        &self,
        request: Request<pb::ListInstancesRequest>,
    ) -> Result<Response<pb::ListInstancesResponse>, Status> {
        let r = request.into_inner();
        let task_id = if r.task_id.trim().is_empty() {
            None
        } else {
            Some(parse_id("task_id", &r.task_id).map_err(status)?)
        };
        let instances = if r.active_only {
            let mut active = self.manager.active_instances().await.map_err(status)?;
            active.retain(|i| task_id.is_none_or(|t| i.task_id == t));
            active
        } else {
            self.manager.list_instances(task_id).await.map_err(status)?
        };
        Ok(Response::new(pb::ListInstancesResponse {
            instances: instances
                .into_iter()
                .map(|i| instance_to_proto(i, self.manager_id()))
                .collect(),
        }))
    }

    async fn list_agent_types(
        &self,
        request: Request<pb::ListAgentTypesRequest>,
    ) -> Result<Response<pb::ListAgentTypesResponse>, Status> {
        let types = self
            .manager
            .list_types(request.into_inner().include_disabled)
            .await
            .map_err(status)?;
        let mut agent_types = Vec::with_capacity(types.len());
        for t in types {
            agent_types.push(self.served_type(t).await);
        }
        Ok(Response::new(pb::ListAgentTypesResponse { agent_types }))
    }

    async fn get_agent_type(
        &self,
        request: Request<pb::GetAgentTypeRequest>,
    ) -> Result<Response<pb::AgentType>, Status> {
        let t = self
            .manager
            .get_type(request.into_inner().id.trim())
            .await
            .map_err(status)?;
        Ok(Response::new(self.served_type(t).await))
    }

    async fn upsert_agent_type(
        &self,
        request: Request<pb::UpsertAgentTypeRequest>,
    ) -> Result<Response<pb::AgentType>, Status> {
        let t = request
            .into_inner()
            .agent_type
            .ok_or_else(|| invalid("agent_type is required"))
            .and_then(type_from_proto)
            .map_err(status)?;
        let t = self.manager.upsert_type(t).await.map_err(status)?;
        Ok(Response::new(self.served_type(t).await))
    }

    async fn respond_permission(
        &self,
        request: Request<pb::RespondPermissionRequest>,
    ) -> Result<Response<pb::RespondPermissionResponse>, Status> {
        let r = request.into_inner();
        let id = parse_id("instance_id", &r.instance_id).map_err(status)?;
        let decision = if r.cancelled || r.option_id.is_empty() {
            PermissionDecision::Cancel
        } else {
            PermissionDecision::Select(r.option_id)
        };
        self.manager
            .respond_permission(id, &r.request_id, decision, &r.actor)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::RespondPermissionResponse {}))
    }

    async fn get_changes(
        &self,
        request: Request<pb::GetChangesRequest>,
    ) -> Result<Response<pb::Changes>, Status> {
        let task_id = parse_id("task_id", &request.into_inner().task_id).map_err(status)?;
        let root = Path::new(&self.manager.settings().workspaces_root);
        let repo = changes::task_changes_repo(root, task_id)
            .await
            .map_err(status)?;
        let c = changes::changes(&repo).await.map_err(status)?;
        let dir = repo.disk_dir().to_path_buf();
        let disk_bytes = tokio::task::spawn_blocking(move || changes::disk_usage(&dir))
            .await
            .unwrap_or(0);
        Ok(Response::new(pb::Changes {
            task_id: task_id.to_string(),
            workspace_path: if repo.clone_removed() {
                String::new()
            } else {
                repo.workspace().display().to_string()
            },
            delivered: c.delivered.map(|d| pb::DeliveredChange {
                branch: d.branch,
                commit: d.commit,
                pushed_to: d.pushed_to.unwrap_or_default(),
            }),
            clone_removed: c.clone_removed,
            branch: c.branch,
            base_branch: c.base_branch,
            base_commit: c.base_commit,
            head_commit: c.head_commit,
            files: c
                .files
                .into_iter()
                .map(|f| pb::FileChange {
                    path: f.path,
                    old_path: f.old_path.unwrap_or_default(),
                    status: f.status.as_str().to_string(),
                    additions: i64::try_from(f.additions).unwrap_or(i64::MAX),
                    deletions: i64::try_from(f.deletions).unwrap_or(i64::MAX),
                    binary: f.binary,
                })
                .collect(),
            disk_bytes: i64::try_from(disk_bytes).unwrap_or(i64::MAX),
        }))
    }

    async fn remove_workspace(
        &self,
        request: Request<pb::RemoveWorkspaceRequest>,
    ) -> Result<Response<pb::RemoveWorkspaceResponse>, Status> {
        let request = request.into_inner();
        let task_id = parse_id("task_id", &request.task_id).map_err(status)?;
        let running = self
            .manager
            .list_instances(Some(task_id))
            .await
            .map_err(status)?
            .into_iter()
            .any(|i| !i.status.is_terminal());
        if running {
            return Err(status(AgentError::FailedPrecondition(
                "an agent of the task is still running in its workspace".into(),
            )));
        }
        let root = Path::new(&self.manager.settings().workspaces_root);
        let freed = if request.keep_delivered {
            changes::remove_clone_keeping_delivery(root, task_id).await
        } else {
            changes::remove_workspace(root, task_id).await
        }
        .map_err(status)?;
        if let Some(bytes) = freed {
            tracing::info!(%task_id, bytes, "workspace removed");
        }
        Ok(Response::new(pb::RemoveWorkspaceResponse {
            removed: freed.is_some(),
            bytes: freed.map_or(0, |b| i64::try_from(b).unwrap_or(i64::MAX)),
        }))
    }

    async fn check_repository(
        &self,
        request: Request<pb::CheckRepositoryRequest>,
    ) -> Result<Response<pb::CheckRepositoryResponse>, Status> {
        let r = request.into_inner();
        let refusal = preflight::check(self.manager.settings(), &r.repository_url, &r.branch)
            .await
            .map_err(status)?;
        Ok(Response::new(match refusal {
            None => pb::CheckRepositoryResponse::default(),
            Some(refusal) => pb::CheckRepositoryResponse {
                problem: problem_to_proto(refusal.problem) as i32,
                message: refusal.message,
            },
        }))
    }

    async fn deliver_changes(
        &self,
        request: Request<pb::DeliverChangesRequest>,
    ) -> Result<Response<pb::Delivery>, Status> {
        let r = request.into_inner();
        let task_id = parse_id("task_id", &r.task_id).map_err(status)?;
        let settings = self.manager.settings();
        let repo = changes::task_repo(Path::new(&settings.workspaces_root), task_id)
            .await
            .map_err(status)?;
        let author = delivery::Author {
            name: Some(r.author_name)
                .filter(|n| !n.trim().is_empty())
                .unwrap_or_else(|| "Kandev".into()),
            email: Some(r.author_email)
                .filter(|e| !e.trim().is_empty())
                .unwrap_or_else(|| "kandev@localhost".into()),
        };
        let how = match (r.merge, r.push) {
            (true, _) => delivery::Ship::Merge,
            (false, true) => delivery::Ship::Push,
            (false, false) => delivery::Ship::Commit,
        };
        let push_auth = Some(r.push_auth.as_str()).filter(|a| !a.is_empty());
        let d = delivery::deliver(&repo, settings, &r.message, &author, how, push_auth)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::Delivery {
            branch: d.branch,
            commit: d.commit,
            committed: d.committed,
            pushed_to: d.pushed_to.unwrap_or_default(),
            base_branch: d.base_branch,
        }))
    }

    async fn get_file_diff(
        &self,
        request: Request<pb::GetFileDiffRequest>,
    ) -> Result<Response<pb::FileDiff>, Status> {
        let r = request.into_inner();
        let task_id = parse_id("task_id", &r.task_id).map_err(status)?;
        let root = Path::new(&self.manager.settings().workspaces_root);
        let repo = changes::task_changes_repo(root, task_id)
            .await
            .map_err(status)?;
        let d = changes::file_diff(&repo, &r.path, changes::MAX_DIFF_BYTES)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::FileDiff {
            path: d.path,
            diff: d.diff,
            truncated: d.truncated,
            binary: d.binary,
        }))
    }

    async fn list_user_secrets(
        &self,
        request: Request<pb::ListUserSecretsRequest>,
    ) -> Result<Response<pb::UserSecretList>, Status> {
        let r = request.into_inner();
        let secrets = self
            .manager
            .secrets()
            .list(&r.scope)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::UserSecretList {
            secrets: secrets.into_iter().map(secret_to_proto).collect(),
        }))
    }

    async fn set_user_secret(
        &self,
        request: Request<pb::SetUserSecretRequest>,
    ) -> Result<Response<pb::UserSecret>, Status> {
        let r = request.into_inner();
        let saved = self
            .manager
            .secrets()
            .set(&r.scope, &r.name, &r.value)
            .await
            .map_err(status)?;
        Ok(Response::new(secret_to_proto(saved)))
    }

    async fn delete_user_secret(
        &self,
        request: Request<pb::DeleteUserSecretRequest>,
    ) -> Result<Response<pb::DeleteUserSecretResponse>, Status> {
        let r = request.into_inner();
        self.manager
            .secrets()
            .delete(&r.scope, &r.name)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::DeleteUserSecretResponse {}))
    }

    #[tracing::instrument(skip_all, fields(scope = %request.get_ref().scope, name = %request.get_ref().name))]
    async fn open_user_secret(
        &self,
        request: Request<pb::OpenUserSecretRequest>,
    ) -> Result<Response<pb::OpenedUserSecret>, Status> {
        use secrecy::ExposeSecret;
        let r = request.into_inner();
        let value = self
            .manager
            .secrets()
            .open_one(&r.scope, &r.name)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::OpenedUserSecret {
            value: value.expose_secret().to_string(),
        }))
    }

    async fn list_agent_profiles(
        &self,
        request: Request<pb::ListAgentProfilesRequest>,
    ) -> Result<Response<pb::AgentProfileList>, Status> {
        let list = profiles::rpc::list(&self.manager, request.into_inner());
        Ok(Response::new(list.await.map_err(status)?))
    }

    async fn get_agent_profile(
        &self,
        request: Request<pb::GetAgentProfileRequest>,
    ) -> Result<Response<pb::AgentProfile>, Status> {
        let got = profiles::rpc::get(&self.manager, request.into_inner());
        Ok(Response::new(got.await.map_err(status)?))
    }

    async fn save_agent_profile(
        &self,
        request: Request<pb::SaveAgentProfileRequest>,
    ) -> Result<Response<pb::AgentProfile>, Status> {
        let saved = profiles::rpc::save(&self.manager, request.into_inner());
        Ok(Response::new(saved.await.map_err(status)?))
    }

    async fn delete_agent_profile(
        &self,
        request: Request<pb::DeleteAgentProfileRequest>,
    ) -> Result<Response<pb::DeleteAgentProfileResponse>, Status> {
        let deleted = profiles::rpc::delete(&self.manager, request.into_inner());
        deleted.await.map_err(status)?;
        Ok(Response::new(pb::DeleteAgentProfileResponse {}))
    }
}

fn problem_to_proto(problem: Problem) -> pb::RepositoryProblem {
    match problem {
        Problem::Invalid => pb::RepositoryProblem::Invalid,
        Problem::InvalidBranch => pb::RepositoryProblem::InvalidBranch,
        Problem::NotAllowed => pb::RepositoryProblem::NotAllowed,
        Problem::NotFound => pb::RepositoryProblem::NotFound,
        Problem::NotARepository => pb::RepositoryProblem::NotARepository,
        Problem::UnknownBranch => pb::RepositoryProblem::UnknownBranch,
    }
}

fn secret_to_proto(s: SecretEntry) -> pb::UserSecret {
    pb::UserSecret {
        name: s.name,
        updated_at: Some(from_chrono(s.updated_at)),
    }
}
