//! What a run of a profile gets: the ACP `mcpServers` (secrets opened into
//! their env and headers), the profile's environment, its mode, model and
//! instructions. Its `Debug` names the secrets' variables, never values.

use std::collections::BTreeMap;

use kandev_acp::schema::{
    EnvVariable, HttpHeader, McpServer, McpServerHttp, McpServerSse, McpServerStdio,
};
use secrecy::{ExposeSecret, SecretString};

use super::{AgentProfile, McpTransport};
use crate::domain::{AgentError, Result};

/// A profile ready for a run.
#[derive(Clone)]
pub struct ResolvedProfile {
    pub id: uuid::Uuid,
    pub name: String,
    pub model: String,
    pub mode: String,
    pub instructions: String,
    /// `KEY=VALUE` added to the container's environment.
    pub env: Vec<String>,
    pub mcp_servers: Vec<McpServer>,
    /// Which transports the servers need (for the capability check).
    pub transports: Vec<(String, McpTransport)>,
}

impl std::fmt::Debug for ResolvedProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedProfile")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("model", &self.model)
            .field("mode", &self.mode)
            .field("env", &crate::domain::env_names(&self.env))
            .field("mcp_servers", &self.transports)
            .finish_non_exhaustive()
    }
}

/// Opens the profile's secrets from the run's user's (`secrets`): one
/// missing is a plain refusal naming it.
pub fn resolve(
    profile: &AgentProfile,
    secrets: &BTreeMap<String, SecretString>,
) -> Result<ResolvedProfile> {
    let open = |secret: &str| -> Result<String> {
        secrets
            .get(secret)
            .map(|v| v.expose_secret().to_string())
            .ok_or_else(|| {
                AgentError::FailedPrecondition(format!(
                    "the agent profile {:?} reads the secret {secret}: store it on the Secrets page",
                    profile.name
                ))
            })
    };
    let spec = &profile.spec;
    let mut env = Vec::new();
    for (name, secret) in &spec.env {
        env.push(format!("{name}={}", open(secret)?));
    }
    let mut mcp_servers = Vec::new();
    let mut transports = Vec::new();
    for s in &spec.mcp_servers {
        transports.push((s.name.clone(), s.transport));
        let server = match s.transport {
            McpTransport::Stdio => {
                let mut vars = Vec::new();
                for (name, secret) in &s.env {
                    vars.push(EnvVariable::new(name.clone(), open(secret)?));
                }
                McpServer::Stdio(
                    McpServerStdio::new(s.name.clone(), s.command.clone())
                        .args(s.args.clone())
                        .env(vars),
                )
            }
            McpTransport::Http | McpTransport::Sse => {
                let mut headers = Vec::new();
                for (name, secret) in &s.headers {
                    headers.push(HttpHeader::new(name.clone(), open(secret)?));
                }
                if s.transport == McpTransport::Http {
                    McpServer::Http(
                        McpServerHttp::new(s.name.clone(), s.url.clone()).headers(headers),
                    )
                } else {
                    McpServer::Sse(
                        McpServerSse::new(s.name.clone(), s.url.clone()).headers(headers),
                    )
                }
            }
        };
        mcp_servers.push(server);
    }
    Ok(ResolvedProfile {
        id: profile.id,
        name: profile.name.clone(),
        model: spec.model.clone(),
        mode: spec.mode.clone(),
        instructions: spec.instructions.clone(),
        env,
        mcp_servers,
        transports,
    })
}

/// The servers the agent cannot take (`agentCapabilities.mcpCapabilities`:
/// stdio always; http and sse when advertised), as a plain error.
pub fn check_capabilities(
    profile: &ResolvedProfile,
    http: bool,
    sse: bool,
) -> std::result::Result<(), String> {
    let refused: Vec<String> = profile
        .transports
        .iter()
        .filter(|(_, t)| match t {
            McpTransport::Stdio => false,
            McpTransport::Http => !http,
            McpTransport::Sse => !sse,
        })
        .map(|(name, t)| format!("{name:?} ({})", t.as_str()))
        .collect();
    if refused.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the agent profile {:?} gives MCP servers the agent cannot take: {} (the agent does not \
         advertise that transport in mcpCapabilities)",
        profile.name,
        refused.join(", ")
    ))
}
