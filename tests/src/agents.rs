//! Real agents for the end-to-end tests: Claude Code, Codex and Gemini CLI
//! through their ACP adapters, in the images Kandev itself builds from the
//! recipes under `dockerfiles/`, talking to `kandev-model-stub` (a scripted
//! stand-in for their vendor's model API) on the container's own loopback:
//! the container keeps network mode `none`.
//!
//! [`scripted_image`] layers the stand-in onto the image Kandev built, as
//! `kandev-test/<type>:latest`; the type the test registers runs
//! `kandev-model-stub -- <the adapter>`, so the adapter is the container's
//! ACP peer and the stand-in serves beside it.

use std::{path::Path, process::Command};

/// Where the stand-in listens in the container.
pub const STUB_URL: &str = "http://127.0.0.1:8790";
/// The key the stand-ins accept (`kandev_model_stub::script::key_ok`).
pub const GOOD_KEY: &str = "kandev-test-key";

/// One real agent as the tests drive it.
#[derive(Debug, Clone, Copy)]
pub struct RealAgent {
    /// The built-in agent type (its image is `kandev/<type_id>:latest`).
    pub type_id: &'static str,
    /// The adapter's command, as the built-in type runs it.
    pub command: &'static [&'static str],
    /// The variable holding the user's key.
    pub key_env: &'static str,
    /// The adapter's `agentInfo.name`, as it answers `initialize`.
    pub acp_name: &'static str,
    /// Variables that point the agent at the stand-in.
    pub stub_env: &'static [(&'static str, &'static str)],
    /// Files put into the agent's home (relative to `/home/agent`).
    pub home_files: &'static [(&'static str, &'static str)],
    /// What the user sees when the key is wrong (part of it).
    pub wrong_key_words: &'static str,
    /// gemini-cli 0.61 loses a session loaded in the same wall-clock minute
    /// it was created in (it rewrites the session's file, named by the
    /// minute, before reading it): its test resumes in a later minute.
    pub resume_in_a_later_minute: bool,
}

pub const CLAUDE: RealAgent = RealAgent {
    type_id: "claude-code",
    command: &["claude-agent-acp"],
    key_env: "ANTHROPIC_API_KEY",
    acp_name: "@agentclientprotocol/claude-agent-acp",
    stub_env: &[("ANTHROPIC_BASE_URL", STUB_URL)],
    home_files: &[],
    wrong_key_words: "Invalid API key",
    resume_in_a_later_minute: false,
};

/// Codex through codex-acp: the stand-in as a model provider of its own
/// (plain HTTP, no retries), so nothing reaches OpenAI.
pub const CODEX: RealAgent = RealAgent {
    type_id: "codex",
    command: &["codex-acp"],
    key_env: "OPENAI_API_KEY",
    acp_name: "@agentclientprotocol/codex-acp",
    stub_env: &[],
    home_files: &[(
        ".codex/config.toml",
        r#"check_for_update_on_startup = false
model_provider = "kandev"

[model_providers.kandev]
name = "Kandev's scripted stand-in"
base_url = "http://127.0.0.1:8790/v1"
wire_api = "responses"
requires_openai_auth = true
supports_websockets = false
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[feedback]
enabled = false
"#,
    )],
    wrong_key_words: "could not use its credentials",
    resume_in_a_later_minute: false,
};

/// Gemini CLI in ACP mode: the stand-in as its base URL, one attempt per
/// request.
pub const GEMINI: RealAgent = RealAgent {
    type_id: "gemini",
    command: &["gemini", "--acp"],
    key_env: "GEMINI_API_KEY",
    acp_name: "gemini-cli",
    stub_env: &[("GOOGLE_GEMINI_BASE_URL", STUB_URL)],
    home_files: &[(
        ".gemini/settings.json",
        r#"{"general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false,
             "maxAttempts": 1, "retryFetchErrors": false},
 "privacy": {"usageStatisticsEnabled": false}, "telemetry": {"enabled": false},
 "ide": {"enabled": false}, "security": {"folderTrust": {"enabled": false}}}
"#,
    )],
    wrong_key_words: "API key not valid",
    resume_in_a_later_minute: true,
};

impl RealAgent {
    /// The image Kandev builds for the type.
    pub fn image(&self) -> String {
        format!("kandev/{}:latest", self.type_id)
    }

    /// The stand-in layered onto it.
    pub fn scripted_image(&self) -> String {
        format!("kandev-test/{}:latest", self.type_id)
    }

    /// The command of the scripted type: the stand-in, then the adapter.
    pub fn scripted_command(&self) -> Vec<String> {
        let mut command = vec!["/usr/local/bin/kandev-model-stub".to_string(), "--".into()];
        command.extend(self.command.iter().map(|s| s.to_string()));
        command
    }
}

/// Builds `kandev-test/<type>:latest` on the image Kandev built for the
/// type: the stand-in's binary of this build, the variables that point the
/// agent at it and the agent's home files. Blocking.
pub fn scripted_image(agent: &RealAgent) -> String {
    let dir = tempfile::tempdir().expect("a temp dir");
    let stub = crate::binary("kandev-model-stub");
    std::fs::copy(&stub, dir.path().join("kandev-model-stub"))
        .unwrap_or_else(|e| panic!("{} (scripts/test builds it): {e}", stub.display()));
    let mut dockerfile = format!(
        "FROM {}\nCOPY --chown=0:0 kandev-model-stub /usr/local/bin/kandev-model-stub\n",
        agent.image()
    );
    for (name, value) in agent.stub_env {
        dockerfile.push_str(&format!("ENV {name}={value}\n"));
    }
    for (i, (path, text)) in agent.home_files.iter().enumerate() {
        let file = format!("home-{i}");
        write(dir.path(), &file, text);
        dockerfile.push_str(&format!(
            "COPY --chown=1000:1000 {file} /home/agent/{path}\n"
        ));
    }
    write(dir.path(), "Dockerfile", &dockerfile);
    let tag = agent.scripted_image();
    let out = Command::new("docker")
        .args(["build", "--pull=false", "-q", "-t", &tag])
        .arg(dir.path())
        .output()
        .expect("docker runs");
    assert!(
        out.status.success(),
        "building {tag} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    tag
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write into the build context");
}
