//! The orchestrator's domain: execution states, the [`Orchestration`] trait
//! that gRPC, REST and WebSocket adapters call, and [`OrchestratorError`].

use chrono::{DateTime, Utc};
use kandev_common::{ErrorCode, ServiceError};
use kandev_proto::v1 as pb;
use serde::Serialize;
use uuid::Uuid;

/// Where a task's execution stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecState {
    Idle,
    Queued,
    Launching,
    Running,
    RetryWait,
    Completed,
    Failed,
    Stopped,
}

impl TryFrom<String> for ExecState {
    type Error = String;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        ExecState::parse(&s)
    }
}

impl ExecState {
    pub const ALL: [ExecState; 8] = [
        ExecState::Idle,
        ExecState::Queued,
        ExecState::Launching,
        ExecState::Running,
        ExecState::RetryWait,
        ExecState::Completed,
        ExecState::Failed,
        ExecState::Stopped,
    ];

    /// The name stored in the database and shown over REST.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecState::Idle => "idle",
            ExecState::Queued => "queued",
            ExecState::Launching => "launching",
            ExecState::Running => "running",
            ExecState::RetryWait => "retry_wait",
            ExecState::Completed => "completed",
            ExecState::Failed => "failed",
            ExecState::Stopped => "stopped",
        }
    }

    /// A stored name; anything else is an error, never a default.
    pub fn parse(s: &str) -> Result<ExecState, String> {
        ExecState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| format!("unknown execution state {s:?}"))
    }

    /// Launching or running: holds a concurrency slot.
    pub fn is_active(self) -> bool {
        matches!(self, ExecState::Launching | ExecState::Running)
    }

    /// Launching, running or waiting to retry: a run holds a container or
    /// will take one.
    pub fn is_in_flight(self) -> bool {
        matches!(
            self,
            ExecState::Launching | ExecState::Running | ExecState::RetryWait
        )
    }

    pub fn to_proto(self) -> pb::ExecutionState {
        match self {
            ExecState::Idle => pb::ExecutionState::Idle,
            ExecState::Queued => pb::ExecutionState::Queued,
            ExecState::Launching => pb::ExecutionState::Launching,
            ExecState::Running => pb::ExecutionState::Running,
            ExecState::RetryWait => pb::ExecutionState::RetryWait,
            ExecState::Completed => pb::ExecutionState::Completed,
            ExecState::Failed => pb::ExecutionState::Failed,
            ExecState::Stopped => pb::ExecutionState::Stopped,
        }
    }
}

/// What `GetTaskExecution` and `GET .../status` report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecutionView {
    pub task_id: Uuid,
    pub state: ExecState,
    pub instance_id: Option<Uuid>,
    pub attempts: i32,
    /// 1-based place in the launch queue; 0 when not queued.
    pub queue_position: i32,
    pub last_error: String,
    pub acp_session_id: String,
    pub updated_at: DateTime<Utc>,
    /// The highest feed seq of the task, stored or not yet stored.
    pub last_seq: i64,
    /// Where the agent manager that ran the task answers (the pool's
    /// announcement), or empty.
    #[serde(skip)]
    pub agent_manager_url: String,
    /// Whose stored secrets and agent home volume the run uses (a
    /// username), or empty.
    pub run_as: String,
}

impl ExecutionView {
    /// A task that never ran.
    pub fn idle(task_id: Uuid, last_seq: i64) -> ExecutionView {
        ExecutionView {
            task_id,
            state: ExecState::Idle,
            instance_id: None,
            attempts: 0,
            queue_position: 0,
            last_error: String::new(),
            acp_session_id: String::new(),
            updated_at: Utc::now(),
            last_seq,
            agent_manager_url: String::new(),
            run_as: String::new(),
        }
    }

    pub fn to_proto(&self) -> pb::TaskExecution {
        pb::TaskExecution {
            task_id: self.task_id.to_string(),
            state: self.state.to_proto() as i32,
            instance_id: self.instance_id.map(|i| i.to_string()).unwrap_or_default(),
            attempts: self.attempts,
            queue_position: self.queue_position,
            last_error: self.last_error.clone(),
            acp_session_id: self.acp_session_id.clone(),
            updated_at: Some(kandev_proto::time::from_chrono(self.updated_at)),
            last_seq: self.last_seq,
            agent_manager_url: self.agent_manager_url.clone(),
            run_as: self.run_as.clone(),
        }
    }
}

pub type Result<T, E = OrchestratorError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum OrchestratorError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Validation(String),
    #[error("{0}")]
    NotFound(String),
    /// A caller who did not prove who they are (a webhook's signature).
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    FailedPrecondition(String),
    /// A bounded holding is full (the follow-ups waiting for a turn).
    #[error("{0}")]
    Full(String),
    /// An error answered by the task service or the agent manager.
    #[error("{service}: {}", status.message())]
    Upstream {
        service: &'static str,
        status: tonic::Status,
    },
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// A broken contract between services (e.g. an unknown task state).
    #[error("internal: {0}")]
    Internal(String),
}

impl OrchestratorError {
    pub fn upstream(service: &'static str) -> impl FnOnce(tonic::Status) -> Self {
        move |status| OrchestratorError::Upstream { service, status }
    }
}

impl ServiceError for OrchestratorError {
    fn error_code(&self) -> ErrorCode {
        match self {
            OrchestratorError::BadRequest(_) => ErrorCode::BadRequest,
            OrchestratorError::Validation(_) => ErrorCode::Validation,
            OrchestratorError::NotFound(_) => ErrorCode::NotFound,
            OrchestratorError::Unauthenticated(_) => ErrorCode::Unauthorized,
            OrchestratorError::FailedPrecondition(_) => ErrorCode::FailedPrecondition,
            OrchestratorError::Full(_) => ErrorCode::RateLimited,
            OrchestratorError::Upstream { status, .. } => match status.code() {
                // The dependency itself is down, whatever it says.
                tonic::Code::Unknown => ErrorCode::Unavailable,
                code => ErrorCode::from_grpc(code),
            },
            OrchestratorError::Database(_) | OrchestratorError::Internal(_) => ErrorCode::Internal,
        }
    }
}

/// Adds the fields of the object `extra` to the object `into`.
pub fn merge_fields(into: &mut serde_json::Value, extra: serde_json::Value) {
    if let (Some(into), serde_json::Value::Object(extra)) = (into.as_object_mut(), extra) {
        into.extend(extra);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_and_errors_map() {
        for st in ExecState::ALL {
            assert_eq!(ExecState::parse(st.as_str()), Ok(st));
        }
        let e = OrchestratorError::Upstream {
            service: "agent manager",
            status: tonic::Status::unavailable("down"),
        };
        assert_eq!(e.error_code(), ErrorCode::Unavailable);
        assert_eq!(
            OrchestratorError::NotFound("x".into()).to_status().code(),
            tonic::Code::NotFound
        );
    }
}
