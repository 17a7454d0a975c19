//! The browser UI, embedded from `crates/kandev-gateway/web/` at build time
//! (read from disk in debug builds). Unknown paths without a file extension
//! get `index.html`, so client-side routes work. `/js/states.js` is
//! generated from [`kandev_events::TaskState`], the one task-state contract,
//! and [`crate::api::exec_state_name`], the execution states the API reports.

use axum::{
    body::Body,
    http::{StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
use rust_embed::RustEmbed;

#[derive(RustEmbed)]
#[folder = "web/"]
struct Assets;

fn file(path: &str) -> Option<Response> {
    let asset = Assets::get(path)?;
    let mime = mime_guess::from_path(path).first_or_octet_stream();
    let cache = if path == "index.html" {
        "no-cache"
    } else {
        "public, max-age=3600"
    };
    Some(
        (
            [
                (header::CONTENT_TYPE, mime.as_ref().to_string()),
                (header::CACHE_CONTROL, cache.to_string()),
            ],
            Body::from(asset.data.into_owned()),
        )
            .into_response(),
    )
}

/// The task and execution states for the UI, generated from the contracts.
const STATES_MODULE: &str = "js/states.js";

fn states_module() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        format!(
            "{}{}",
            kandev_events::TaskState::es_module(),
            crate::api::exec_states_es_module()
        ),
    )
        .into_response()
}

/// Serves an embedded file, or `index.html` for client-side routes.
pub async fn serve(uri: Uri) -> Response {
    let path = uri.path().trim_start_matches('/');
    let path = if path.is_empty() { "index.html" } else { path };
    if path == STATES_MODULE {
        return states_module();
    }
    if let Some(response) = file(path) {
        return response;
    }
    let last = path.rsplit('/').next().unwrap_or_default();
    if !last.contains('.')
        && let Some(index) = file("index.html")
    {
        return index;
    }
    (StatusCode::NOT_FOUND, "not found").into_response()
}
