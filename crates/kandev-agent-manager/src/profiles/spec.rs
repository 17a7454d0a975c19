//! The profile as data, and its validation: one typed contract, checked
//! when a profile is saved (and again when it is read back, so a row
//! written by an older version cannot run unchecked).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::{AgentError, AgentType, Result, check_name, env_name_ok};

/// Bounds of what a profile may hold.
const MAX_NAME: usize = 100;
const MAX_INSTRUCTIONS: usize = 32 * 1024;
const MAX_SERVERS: usize = 16;
const MAX_ARGS: usize = 64;
const MAX_VARS: usize = 32;
const MAX_TEXT: usize = 2048;

/// An agent profile: named settings on an agent type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentProfile {
    pub id: Uuid,
    /// The owning user; empty for a profile shared by an admin.
    pub owner: String,
    pub agent_type: String,
    pub name: String,
    pub spec: ProfileSpec,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// What a profile sets (stored as one JSON document).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSpec {
    /// The model (`session/set_model`, or the session's `model` config
    /// option); empty: the agent's own.
    #[serde(default)]
    pub model: String,
    /// The session mode (`session/set_mode`); empty: the agent's own.
    #[serde(default)]
    pub mode: String,
    /// Prepended to the first prompt of each new session.
    #[serde(default)]
    pub instructions: String,
    /// Variable name -> the owner's secret that gives its value.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub mcp_servers: Vec<McpServerSpec>,
}

/// An MCP server given to the agent in `session/new` / `session/load`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerSpec {
    pub name: String,
    pub transport: McpTransport,
    /// stdio: run inside the agent's container.
    #[serde(default)]
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// stdio: variable name -> secret name.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// http / sse.
    #[serde(default)]
    pub url: String,
    /// http / sse: header name -> secret name.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// How the agent reaches an MCP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum McpTransport {
    Stdio,
    Http,
    Sse,
}

impl McpTransport {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "stdio" => Ok(McpTransport::Stdio),
            "http" => Ok(McpTransport::Http),
            "sse" => Ok(McpTransport::Sse),
            other => Err(field_err(
                "transport",
                format!("unknown transport {other:?}: stdio, http or sse"),
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            McpTransport::Stdio => "stdio",
            McpTransport::Http => "http",
            McpTransport::Sse => "sse",
        }
    }
}

/// A validation error naming its field: `field: problem` (the gateway
/// splits it into the 400's details).
pub fn field_err(field: &str, problem: impl std::fmt::Display) -> AgentError {
    AgentError::InvalidArgument(format!("{field}: {problem}"))
}

/// The modes an agent type is known to advertise (`availableModes`), for
/// the types Kandev ships; `None`: the type declares none, and a mode is
/// checked against the session's own list when it starts.
pub fn declared_modes(agent_type: &str) -> Option<&'static [&'static str]> {
    match agent_type {
        "mock-agent" => Some(&["default", "accept-edits", "plan"]),
        "claude-code" => Some(&[
            "default",
            "acceptEdits",
            "plan",
            "dontAsk",
            "bypassPermissions",
        ]),
        _ => None,
    }
}

fn check_text(field: &str, value: &str, max: usize) -> Result<()> {
    if value.len() > max {
        return Err(field_err(field, format!("at most {max} bytes")));
    }
    if value.contains('\0') {
        return Err(field_err(field, "must not contain NUL bytes"));
    }
    Ok(())
}

/// Model and mode ids: printable, no spaces.
fn check_id(field: &str, value: &str) -> Result<()> {
    check_text(field, value, 200)?;
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(field_err(
            field,
            "must not contain spaces or control characters",
        ));
    }
    Ok(())
}

fn check_secret_refs(field: &str, map: &BTreeMap<String, String>, header: bool) -> Result<()> {
    if map.len() > MAX_VARS {
        return Err(field_err(field, format!("at most {MAX_VARS} entries")));
    }
    for (key, secret) in map {
        let ok = if header {
            header_name_ok(key)
        } else {
            env_name_ok(key) && check_name(key).is_ok()
        };
        if !ok {
            let what = if header {
                "a header name"
            } else {
                "an environment variable name"
            };
            return Err(field_err(
                &format!("{field}.{key}"),
                format!("{key:?} is not {what}"),
            ));
        }
        check_name(secret)
            .map_err(|e| field_err(&format!("{field}.{key}"), format!("secret {secret:?}: {e}")))?;
    }
    Ok(())
}

/// An HTTP header name (RFC 9110 token).
fn header_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// An absolute http(s) URL with a host and nothing a header could smuggle.
fn url_ok(url: &str) -> bool {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    let Some(rest) = rest else { return false };
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    !host.is_empty()
        && !host.contains('@')
        && url.len() <= MAX_TEXT
        && !url.chars().any(|c| c.is_whitespace() || c.is_control())
}

impl McpServerSpec {
    fn validate(&self, at: &str) -> Result<()> {
        let name_ok = !self.name.trim().is_empty()
            && self.name.len() <= MAX_NAME
            && !self.name.chars().any(char::is_control);
        if !name_ok {
            return Err(field_err(
                &format!("{at}.name"),
                format!("1-{MAX_NAME} printable characters"),
            ));
        }
        match self.transport {
            McpTransport::Stdio => {
                if self.command.trim().is_empty() {
                    return Err(field_err(
                        &format!("{at}.command"),
                        "required for a stdio server",
                    ));
                }
                check_text(&format!("{at}.command"), &self.command, MAX_TEXT)?;
                if self.args.len() > MAX_ARGS {
                    return Err(field_err(
                        &format!("{at}.args"),
                        format!("at most {MAX_ARGS}"),
                    ));
                }
                for (i, arg) in self.args.iter().enumerate() {
                    check_text(&format!("{at}.args[{i}]"), arg, MAX_TEXT)?;
                }
                check_secret_refs(&format!("{at}.env"), &self.env, false)?;
                if !self.url.is_empty() || !self.headers.is_empty() {
                    return Err(field_err(
                        at,
                        "a stdio server has a command, not a url or headers",
                    ));
                }
            }
            McpTransport::Http | McpTransport::Sse => {
                if !url_ok(&self.url) {
                    return Err(field_err(
                        &format!("{at}.url"),
                        "an http:// or https:// URL with a host (no credentials in it)",
                    ));
                }
                check_secret_refs(&format!("{at}.headers"), &self.headers, true)?;
                if !self.command.is_empty() || !self.args.is_empty() || !self.env.is_empty() {
                    return Err(field_err(
                        at,
                        format!(
                            "an {} server has a url, not a command",
                            self.transport.as_str()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl AgentProfile {
    /// Checks the profile against its agent type.
    pub fn validate(&self, agent_type: &AgentType) -> Result<()> {
        let name_ok = !self.name.trim().is_empty()
            && self.name.len() <= MAX_NAME
            && !self.name.chars().any(char::is_control);
        if !name_ok {
            return Err(field_err(
                "name",
                format!("1-{MAX_NAME} printable characters"),
            ));
        }
        let spec = &self.spec;
        check_id("model", &spec.model)?;
        check_id("mode", &spec.mode)?;
        if !spec.mode.is_empty()
            && let Some(modes) = declared_modes(&agent_type.id)
            && !modes.contains(&spec.mode.as_str())
        {
            return Err(field_err(
                "mode",
                format!(
                    "{} offers no mode {:?}: one of {}",
                    agent_type.id,
                    spec.mode,
                    modes.join(", ")
                ),
            ));
        }
        check_text("instructions", &spec.instructions, MAX_INSTRUCTIONS)?;
        check_secret_refs("env", &spec.env, false)?;
        if spec.mcp_servers.len() > MAX_SERVERS {
            return Err(field_err("mcp_servers", format!("at most {MAX_SERVERS}")));
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, server) in spec.mcp_servers.iter().enumerate() {
            let at = format!("mcp_servers[{i}]");
            server.validate(&at)?;
            if !names.insert(server.name.as_str()) {
                return Err(field_err(
                    &format!("{at}.name"),
                    format!("{:?} is named twice", server.name),
                ));
            }
        }
        Ok(())
    }

    /// The secrets the profile reads, each once.
    pub fn secret_names(&self) -> std::collections::BTreeSet<&str> {
        let spec = &self.spec;
        spec.env
            .values()
            .chain(
                spec.mcp_servers
                    .iter()
                    .flat_map(|s| s.env.values().chain(s.headers.values())),
            )
            .map(String::as_str)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(spec: ProfileSpec) -> AgentProfile {
        AgentProfile {
            id: Uuid::nil(),
            owner: "alice".into(),
            agent_type: "mock-agent".into(),
            name: "p".into(),
            spec,
            created_at: Utc::now(),
            updated_at: Utc::now(),
        }
    }

    fn agent_type(id: &str) -> AgentType {
        AgentType {
            id: id.into(),
            name: id.into(),
            description: String::new(),
            image: String::new(),
            command: vec![],
            working_dir: String::new(),
            memory_mb: 0,
            cpu_cores: 0.0,
            pids_limit: 0,
            timeout_seconds: 0,
            capabilities: vec![],
            required_env: vec![],
            optional_env: vec![],
            credential_mounts: crate::domain::CredentialMounts::default(),
            network_mode: String::new(),
            permission_policy: crate::domain::PermissionPolicyKind::AutoApprove,
            enabled: true,
            home_volume: String::new(),
            state_paths: vec![],
            internal: false,
            host_credentials: false,
        }
    }

    fn mock_type() -> AgentType {
        agent_type("mock-agent")
    }

    fn stdio(name: &str) -> McpServerSpec {
        McpServerSpec {
            name: name.into(),
            transport: McpTransport::Stdio,
            command: "/usr/bin/mcp".into(),
            args: vec![],
            env: BTreeMap::new(),
            url: String::new(),
            headers: BTreeMap::new(),
        }
    }

    fn problem(spec: ProfileSpec) -> String {
        profile(spec)
            .validate(&mock_type())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_declared_type_refuses_an_unknown_mode() {
        let ok = ProfileSpec {
            mode: "plan".into(),
            ..Default::default()
        };
        profile(ok).validate(&mock_type()).unwrap();
        let bad = problem(ProfileSpec {
            mode: "yolo".into(),
            ..Default::default()
        });
        assert!(bad.starts_with("mode: mock-agent offers no mode"), "{bad}");
        let other = agent_type("custom");
        profile(ProfileSpec {
            mode: "yolo".into(),
            ..Default::default()
        })
        .validate(&other)
        .unwrap();
    }

    #[test]
    fn servers_are_checked_by_transport() {
        let mut no_command = stdio("a");
        no_command.command.clear();
        let bad = problem(ProfileSpec {
            mcp_servers: vec![no_command],
            ..Default::default()
        });
        assert!(bad.starts_with("mcp_servers[0].command"), "{bad}");
        let mut http = stdio("h");
        http.transport = McpTransport::Http;
        http.command.clear();
        http.url = "ftp://x".into();
        let bad = problem(ProfileSpec {
            mcp_servers: vec![http.clone()],
            ..Default::default()
        });
        assert!(bad.starts_with("mcp_servers[0].url"), "{bad}");
        http.url = "https://user:pw@host/x".into();
        assert!(
            problem(ProfileSpec {
                mcp_servers: vec![http.clone()],
                ..Default::default()
            })
            .contains("url")
        );
        http.url = "https://mcp.example/x".into();
        http.headers.insert("Bad Header".into(), "TOKEN".into());
        let bad = problem(ProfileSpec {
            mcp_servers: vec![http.clone()],
            ..Default::default()
        });
        assert!(bad.contains("not a header name"), "{bad}");
        http.headers = BTreeMap::from([("Authorization".into(), "not a name".into())]);
        let bad = problem(ProfileSpec {
            mcp_servers: vec![http.clone()],
            ..Default::default()
        });
        assert!(bad.contains("secret"), "{bad}");
        let twice = problem(ProfileSpec {
            mcp_servers: vec![stdio("a"), stdio("a")],
            ..Default::default()
        });
        assert!(twice.contains("named twice"), "{twice}");
    }

    #[test]
    fn the_secrets_read_are_listed_once() {
        let mut s = stdio("a");
        s.env.insert("TOKEN".into(), "GH".into());
        let p = profile(ProfileSpec {
            env: BTreeMap::from([("X".into(), "GH".into()), ("Y".into(), "OTHER".into())]),
            mcp_servers: vec![s],
            ..Default::default()
        });
        assert_eq!(
            p.secret_names().into_iter().collect::<Vec<_>>(),
            ["GH", "OTHER"]
        );
    }
}
