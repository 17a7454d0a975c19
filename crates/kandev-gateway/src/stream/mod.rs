//! A task's live stream for browsers, served by the gateway itself.
//!
//! The stored feed comes from the orchestrator (`ReadFeed` over gRPC, which
//! includes what it numbered but did not store yet); the live feed from
//! NATS (`feed.<task_id>`, one subscription per task per gateway, fanned
//! out here), so a thousand watchers cost the orchestrator nothing more
//! than one. Commands go to the orchestrator over gRPC. Every frame is
//! sent once and in order: a client tracks the last `seq` it was sent and
//! reads any gap from the stored feed.
//!
//! # Layout
//! - [`live`]: the per-task NATS subscriptions and their fan-out.
//! - [`boards`]: the per-board signals of changed cards and their fan-out
//!   (the board's stream is `routes::board_stream`).
//! - [`session`]: one client: catch up, follow, commands, close codes.

pub mod boards;
pub mod live;
pub mod session;

use async_trait::async_trait;
use axum::extract::ws::Utf8Bytes;
use kandev_common::stream_command::request_id_text;
use kandev_proto::v1 as pb;

use crate::{
    clients::{Answer, Orchestrator, orch_err},
    error::ApiError,
};
use session::{Command, Upstream};

/// The orchestrator, for one task and one user.
pub struct OrchestratorUpstream {
    pub client: Orchestrator,
    pub task_id: String,
    pub actor: String,
}

impl OrchestratorUpstream {
    /// Up to `limit` frames after `after` (0: the orchestrator's page).
    pub async fn read_limit(&self, after: i64, limit: i64) -> Result<Vec<Utf8Bytes>, ApiError> {
        let page = self
            .client
            .clone()
            .read_feed(pb::ReadFeedRequest {
                task_id: self.task_id.clone(),
                after,
                limit,
            })
            .await
            .answer(orch_err)?;
        Ok(page.frames.into_iter().map(Utf8Bytes::from).collect())
    }
}

#[async_trait]
impl Upstream for OrchestratorUpstream {
    async fn read(&self, after: i64) -> Result<Vec<Utf8Bytes>, ApiError> {
        self.read_limit(after, 0).await
    }

    async fn command(&self, command: Command) -> Result<(), ApiError> {
        let mut client = self.client.clone();
        match command {
            Command::Prompt { text } => {
                client
                    .start_task(pb::StartTaskRequest {
                        task_id: self.task_id.clone(),
                        prompt: text,
                        actor: self.actor.clone(),
                    })
                    .await
                    .answer(orch_err)?;
            }
            Command::Cancel => {
                client
                    .cancel_turn(pb::CancelTurnRequest {
                        task_id: self.task_id.clone(),
                        actor: self.actor.clone(),
                    })
                    .await
                    .answer(orch_err)?;
            }
            Command::Permission {
                request_id,
                option_id,
                cancelled,
            } => {
                client
                    .respond_permission(pb::TaskPermissionRequest {
                        task_id: self.task_id.clone(),
                        request_id: request_id_text(request_id),
                        option_id,
                        cancelled,
                        actor: self.actor.clone(),
                    })
                    .await
                    .answer(orch_err)?;
            }
        }
        Ok(())
    }
}
