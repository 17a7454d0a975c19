//! Pull requests (GitHub) and merge requests (GitLab) for a task's pushed
//! branch, through the forges' REST APIs with a token from configuration.
//!
//! A forge is chosen by the task's repository URL: the first configured
//! forge whose `repository_prefix` starts it. The project is the rest of
//! the URL (`owner/repo`, without `.git`).

use serde::{Deserialize, Serialize};
use serde_json::json;

pub use api::CallError;

pub mod api;

/// Which REST API a forge speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ForgeKind {
    Github,
    Gitlab,
}

impl ForgeKind {
    /// The forge's name in messages (`GitHub`, `GitLab`).
    pub fn name(self) -> &'static str {
        match self {
            ForgeKind::Github => "GitHub",
            ForgeKind::Gitlab => "GitLab",
        }
    }

    /// The kind as links and configuration spell it (`github`, `gitlab`).
    pub fn as_str(self) -> &'static str {
        match self {
            ForgeKind::Github => "github",
            ForgeKind::Gitlab => "gitlab",
        }
    }
}

/// One forge (`KANDEV_FORGES`, a list of tables).
#[derive(Clone, Serialize, Deserialize)]
pub struct Forge {
    /// Repositories whose URL starts with this are on this forge
    /// (`https://github.com/`).
    pub repository_prefix: String,
    pub kind: ForgeKind,
    /// The REST API root (`https://api.github.com`,
    /// `https://gitlab.example.com/api/v4`).
    pub api_url: String,
    /// A token allowed to open pull requests. Never logged or returned.
    #[serde(skip_serializing, default)]
    pub token: String,
}

impl std::fmt::Debug for Forge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forge")
            .field("repository_prefix", &self.repository_prefix)
            .field("kind", &self.kind)
            .field("api_url", &self.api_url)
            .field("token", &"[redacted]")
            .finish()
    }
}

/// An opened pull (or merge) request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
    pub url: String,
    pub number: u64,
}

/// Why a pull request could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForgeError {
    #[error(
        "the {forge} token was refused or lacks the scope to open pull requests ({status}): {message}"
    )]
    Unauthorized {
        forge: &'static str,
        status: u16,
        message: String,
    },
    #[error("a pull request for this branch already exists on {forge}: {message}")]
    Exists {
        forge: &'static str,
        message: String,
    },
    #[error(transparent)]
    Call(#[from] CallError),
    #[error("the repository URL {0} names no project on its forge")]
    NoProject(String),
}

/// The forge of `repository_url`, if one is configured.
pub fn forge_for<'a>(forges: &'a [Forge], repository_url: &str) -> Option<&'a Forge> {
    forges.iter().find(|f| {
        !f.repository_prefix.is_empty() && repository_url.starts_with(&f.repository_prefix)
    })
}

/// `user:token` for pushing over https to `forge` (GitHub takes any user
/// with a token; GitLab's is `oauth2`).
pub fn push_auth(forge: &Forge) -> String {
    if forge.token.is_empty() {
        return String::new();
    }
    let user = match forge.kind {
        ForgeKind::Github => "x-access-token",
        ForgeKind::Gitlab => "oauth2",
    };
    format!("{user}:{}", forge.token)
}

/// `owner/repo` (or a GitLab group path) of `repository_url` on `forge`.
pub fn project_path(forge: &Forge, repository_url: &str) -> Option<String> {
    let rest = repository_url.strip_prefix(&forge.repository_prefix)?;
    let rest = rest.trim_matches('/');
    let rest = rest.strip_suffix(".git").unwrap_or(rest);
    (rest.split('/').filter(|s| !s.is_empty()).count() >= 2).then(|| rest.to_string())
}

/// What to open.
#[derive(Debug, Clone)]
pub struct PullRequestSpec<'a> {
    pub repository_url: &'a str,
    pub branch: &'a str,
    pub base: &'a str,
    pub title: &'a str,
    pub body: &'a str,
}

/// Opens a pull request (GitHub) or merge request (GitLab) of
/// `spec.branch` into `spec.base`.
pub async fn open_pull_request(
    client: &reqwest::Client,
    forge: &Forge,
    spec: &PullRequestSpec<'_>,
) -> Result<PullRequest, ForgeError> {
    let name = forge.kind.name();
    let project = project_path(forge, spec.repository_url)
        .ok_or_else(|| ForgeError::NoProject(spec.repository_url.to_string()))?;
    let api = forge.api_url.trim_end_matches('/');
    let (url, body) = match forge.kind {
        ForgeKind::Github => (
            format!("{api}/repos/{project}/pulls"),
            json!({
                "title": spec.title, "head": spec.branch, "base": spec.base, "body": spec.body,
            }),
        ),
        ForgeKind::Gitlab => (
            format!("{api}/projects/{}/merge_requests", urlencoding(&project)),
            json!({
                "source_branch": spec.branch, "target_branch": spec.base,
                "title": spec.title, "description": spec.body,
            }),
        ),
    };
    let request = api::request(client, forge, reqwest::Method::POST, &url).json(&body);
    let answer = api::call(forge, request).await?;
    let (status, message) = (answer.status, answer.message());
    match (forge.kind, status) {
        (_, 200 | 201) => {
            let (url, number) = match forge.kind {
                ForgeKind::Github => (&answer.body["html_url"], &answer.body["number"]),
                ForgeKind::Gitlab => (&answer.body["web_url"], &answer.body["iid"]),
            };
            Ok(PullRequest {
                url: url.as_str().unwrap_or_default().to_string(),
                number: number.as_u64().unwrap_or_default(),
            })
        }
        (_, 401 | 403) | (ForgeKind::Github, 404) => Err(ForgeError::Unauthorized {
            forge: name,
            status,
            message,
        }),
        (ForgeKind::Gitlab, 409) => Err(ForgeError::Exists {
            forge: name,
            message,
        }),
        (ForgeKind::Github, 422) if message.contains("already exists") => Err(ForgeError::Exists {
            forge: name,
            message,
        }),
        _ => Err(answer.refused(forge).into()),
    }
}

/// Percent-encodes a GitLab project path (`group/repo` → `group%2Frepo`).
pub fn urlencoding(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn github() -> Forge {
        Forge {
            repository_prefix: "https://github.com/".into(),
            kind: ForgeKind::Github,
            api_url: "https://api.github.com".into(),
            token: "secret".into(),
        }
    }

    #[test]
    fn a_repository_url_names_its_forge_and_project() {
        let forges = [github()];
        let forge = forge_for(&forges, "https://github.com/acme/app.git").unwrap();
        assert_eq!(
            project_path(forge, "https://github.com/acme/app.git").as_deref(),
            Some("acme/app")
        );
        assert_eq!(
            project_path(forge, "https://github.com/acme").as_deref(),
            None
        );
        assert!(forge_for(&forges, "https://gitlab.com/acme/app").is_none());
        assert!(!format!("{forge:?}").contains("secret"));
        assert_eq!(urlencoding("group/sub/repo"), "group%2Fsub%2Frepo");
    }
}
