//! The gemini stand-in (being written).

use axum::Router;

pub fn routes() -> Router {
    Router::new()
}
