//! A run's agent profile in the ACP session: whether the agent can take
//! its MCP servers (`agentCapabilities.mcpCapabilities`), its mode and
//! model set once the session exists, its instructions before a new
//! session's first prompt. Every refusal is a plain sentence for the
//! person.

use kandev_acp::{AcpClient, Dialect, Handshake, SessionInfo, schema::McpServer};
use serde_json::Value;

use crate::profiles::{ResolvedProfile, resolve::check_capabilities};

/// The `mcpServers` of `session/new` / `session/load`.
pub fn servers(profile: Option<&ResolvedProfile>) -> Vec<McpServer> {
    profile.map(|p| p.mcp_servers.clone()).unwrap_or_default()
}

/// Refuses servers the agent cannot take: any for an agent of the seed or
/// legacy dialect (their sessions take none), an http or sse one the agent
/// does not advertise.
pub fn check(profile: Option<&ResolvedProfile>, handshake: &Handshake) -> Result<(), String> {
    let Some(profile) = profile.filter(|p| !p.mcp_servers.is_empty()) else {
        return Ok(());
    };
    match (&handshake.dialect, &handshake.response) {
        (Dialect::V1, Some(init)) => {
            let caps = &init.agent_capabilities.mcp_capabilities;
            check_capabilities(profile, caps.http, caps.sse)
        }
        _ => Err(format!(
            "the agent profile {:?} gives MCP servers, but the agent does not speak ACP v1, \
             whose sessions take them",
            profile.name
        )),
    }
}

/// The ids of a session answer's list at `list` (objects with `key`).
fn offered(session: &Value, list: &str, key: &str) -> Vec<String> {
    session
        .pointer(list)
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|m| m.get(key).and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Sets the profile's mode (`session/set_mode`, when the session offers
/// it) and model (the session's `model` config option, else
/// `session/set_model` when it lists `models`).
pub async fn apply(
    client: &AcpClient,
    profile: Option<&ResolvedProfile>,
    session: &SessionInfo,
) -> Result<(), String> {
    let Some(profile) = profile else {
        return Ok(());
    };
    let name = &profile.name;
    if !profile.mode.is_empty() {
        let modes = offered(&session.raw, "/modes/availableModes", "id");
        if !modes.contains(&profile.mode) {
            return Err(format!(
                "the agent profile {name:?} asks for mode {:?}, which the agent does not offer \
                 (it offers: {})",
                profile.mode,
                list_or_none(&modes)
            ));
        }
        client.set_mode(&profile.mode).await.map_err(|e| {
            format!(
                "the agent refused the profile's mode {:?}: {e}",
                profile.mode
            )
        })?;
    }
    if !profile.model.is_empty() {
        set_model(client, profile, &session.raw).await?;
    }
    Ok(())
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join(", ")
    }
}

async fn set_model(
    client: &AcpClient,
    profile: &ResolvedProfile,
    session: &Value,
) -> Result<(), String> {
    let model = &profile.model;
    let option = session
        .get("configOptions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|o| o.get("category").and_then(Value::as_str) == Some("model"));
    if let Some(option) = option {
        let id = option.get("id").and_then(Value::as_str).unwrap_or("model");
        let values = offered(option, "/options", "value");
        if !values.contains(model) {
            return Err(format!(
                "the agent profile {:?} asks for model {model:?}, which the agent does not offer \
                 (it offers: {})",
                profile.name,
                list_or_none(&values)
            ));
        }
        return client
            .set_config_option(id, model.as_str().into())
            .await
            .map(|_| ())
            .map_err(|e| format!("the agent refused the profile's model {model:?}: {e}"));
    }
    if session.get("models").is_some() {
        return client
            .set_model(model)
            .await
            .map_err(|e| format!("the agent refused the profile's model {model:?}: {e}"));
    }
    Err(format!(
        "the agent profile {:?} asks for model {model:?}, but the agent offers no choice of model \
         in its session",
        profile.name
    ))
}

/// A new session's first prompt: the profile's instructions, then the
/// prompt.
pub fn first_prompt(profile: Option<&ResolvedProfile>, prompt: String) -> String {
    match profile.filter(|p| !p.instructions.trim().is_empty()) {
        Some(p) => format!("{}\n\n{prompt}", p.instructions.trim_end()),
        None => prompt,
    }
}
