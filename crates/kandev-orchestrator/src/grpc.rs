//! The gRPC adapter: parse the request, call the [`Orchestration`], convert
//! the result. No logic of its own.

use std::sync::Arc;

use kandev_common::ServiceError;
use kandev_proto::v1::{self as pb, orchestrator_server::Orchestrator};
use tonic::{Request, Response, Status};

use crate::{domain::Orchestration, http::parse_task_id};

/// Serves `kandev.v1.Orchestrator` over an [`Orchestration`].
pub struct GrpcOrchestratorAdapter {
    orchestration: Arc<dyn Orchestration>,
}

impl GrpcOrchestratorAdapter {
    pub fn new(orchestration: Arc<dyn Orchestration>) -> Self {
        GrpcOrchestratorAdapter { orchestration }
    }
}

#[tonic::async_trait]
impl Orchestrator for GrpcOrchestratorAdapter {
    async fn start_task(
        &self,
        request: Request<pb::StartTaskRequest>,
    ) -> Result<Response<pb::TaskExecution>, Status> {
        let req = request.into_inner();
        let task_id = parse_task_id(&req.task_id).map_err(|e| e.to_status())?;
        let prompt = Some(req.prompt).filter(|p| !p.is_empty());
        let view = self
            .orchestration
            .start_task(task_id, prompt)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(view.to_proto()))
    }

    async fn stop_task(
        &self,
        request: Request<pb::StopTaskRequest>,
    ) -> Result<Response<pb::TaskExecution>, Status> {
        let req = request.into_inner();
        let task_id = parse_task_id(&req.task_id).map_err(|e| e.to_status())?;
        let view = self
            .orchestration
            .stop_task(task_id, &req.reason)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(view.to_proto()))
    }

    async fn get_task_execution(
        &self,
        request: Request<pb::GetTaskExecutionRequest>,
    ) -> Result<Response<pb::TaskExecution>, Status> {
        let task_id = parse_task_id(&request.into_inner().task_id).map_err(|e| e.to_status())?;
        let view = self
            .orchestration
            .get_execution(task_id)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(view.to_proto()))
    }
}
