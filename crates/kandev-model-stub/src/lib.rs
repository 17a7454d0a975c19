//! Scripted stand-ins for the vendors' model APIs, so real agent CLIs
//! (Claude Code, Codex, Gemini CLI) complete real turns in tests without a
//! vendor: the same wire formats, streaming and errors, answering from a
//! script written in the user's prompt ([`script`]).
//!
//! One server answers all three APIs on distinct paths:
//! - [`anthropic`]: `POST /v1/messages` (Server-Sent Events), as Claude Code
//!   calls it with `ANTHROPIC_BASE_URL`;
//! - [`openai`]: `POST /v1/responses` (Server-Sent Events), as Codex calls it
//!   with its base-URL setting;
//! - [`gemini`]: `POST /v1beta/models/{model}:streamGenerateContent`, as
//!   Gemini CLI calls it with its base-URL setting.
//!
//! A key is accepted when it starts with [`script::ACCEPTED_KEY_PREFIX`];
//! any other key gets the vendor's own 401.

pub mod anthropic;
pub mod gemini;
pub mod openai;
pub mod script;

use axum::Router;

/// Every vendor's routes on one router.
pub fn router() -> Router {
    Router::new()
        .merge(anthropic::routes())
        .merge(openai::routes())
        .merge(gemini::routes())
}
