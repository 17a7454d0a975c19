//! What the REST and WebSocket handlers share: their state and the
//! JSON body of an error.

use std::{sync::Arc, time::Duration};

use kandev_common::{ErrorCode, ServiceError};

use crate::{
    domain::OrchestratorError,
    feed::{FeedHub, store::FeedStore},
    orchestration::Orchestration,
};

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    pub orchestration: Arc<dyn Orchestration>,
    pub hub: Arc<FeedHub>,
    /// The stored feed, for history.
    pub feed: Arc<dyn FeedStore>,
    /// How long a lagging client gets to take its close frame.
    pub close_grace: Duration,
}

/// The JSON body of an error: `{"error","message","details","http_status"}`.
pub fn error_body(err: &OrchestratorError) -> serde_json::Value {
    let code = err.error_code();
    let message = if code == ErrorCode::Internal {
        tracing::error!(error = %err, "internal error");
        "internal error".to_string()
    } else {
        err.to_string()
    };
    serde_json::json!({
        "error": code.as_str(),
        "message": message,
        "details": null,
        "http_status": code.http_status().as_u16(),
    })
}
