//! One way to call a forge's REST API, for pull requests, checks and
//! trackers alike: the token as the forge takes it, a time limit, and an
//! answer read up to [`MAX_ANSWER`] bytes (a forge, or whatever answers in
//! its place, cannot make the orchestrator hold more).

use std::time::Duration;

use serde_json::Value;

use super::{Forge, ForgeKind};

/// The most bytes of a forge's answer read.
pub const MAX_ANSWER: usize = 16 * 1024 * 1024;
/// The most bytes of a forge's message kept.
const MAX_MESSAGE: usize = 500;
/// How long one call may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// What a forge says, as it may be kept: without control characters (but newlines
/// and tabs) or NUL, at most `max` bytes from its start.
pub fn bounded(text: &str, max: usize) -> String {
    let clean: String = text
        .chars()
        .filter(|c| !c.is_control() || matches!(c, '\n' | '\t'))
        .collect();
    let cut = (0..=max.min(clean.len()))
        .rev()
        .find(|i| clean.is_char_boundary(*i))
        .unwrap_or(0);
    clean[..cut].to_string()
}

/// A request to `url` on `forge`'s API, with its token as the forge takes
/// it (GitHub: a bearer token and its API version; GitLab: `PRIVATE-TOKEN`).
pub fn request(
    client: &reqwest::Client,
    forge: &Forge,
    method: reqwest::Method,
    url: &str,
) -> reqwest::RequestBuilder {
    let request = client.request(method, url);
    let request = match forge.kind {
        ForgeKind::Github => request
            .bearer_auth(&forge.token)
            .header("accept", "application/vnd.github+json")
            .header("x-github-api-version", "2022-11-28"),
        ForgeKind::Gitlab => request.header("private-token", &forge.token),
    };
    request.header("user-agent", "kandev").timeout(TIMEOUT)
}

/// A forge's answer: its status and its JSON (`Null` when it sent none,
/// or something else).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Answer {
    /// The forge's refusal of what was asked, in its own words.
    pub fn refused(&self, forge: &Forge) -> CallError {
        CallError::Refused {
            forge: forge.kind.name(),
            status: self.status,
            message: self.message(),
        }
    }

    /// The forge's own words, [`bounded`] to [`MAX_MESSAGE`] bytes: GitHub's
    /// `message` and `errors[].message`, GitLab's `message` (a string or a
    /// list) or `error`.
    pub fn message(&self) -> String {
        let body = &self.body;
        let mut parts: Vec<&str> = Vec::new();
        match &body["message"] {
            Value::String(s) => parts.push(s),
            Value::Array(items) => parts.extend(items.iter().filter_map(Value::as_str)),
            _ => {}
        }
        if let Some(errors) = body["errors"].as_array() {
            parts.extend(
                errors
                    .iter()
                    .filter_map(|e| e["message"].as_str().or_else(|| e.as_str())),
            );
        }
        parts.extend(body["error"].as_str());
        if parts.is_empty() {
            return "no details".into();
        }
        bounded(&parts.join("; "), MAX_MESSAGE)
    }
}

/// Why a call to a forge's API failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("cannot reach {forge}: {message}")]
    Unreachable {
        forge: &'static str,
        message: String,
    },
    #[error("{forge}'s answer is larger than {MAX_ANSWER} bytes")]
    TooLarge { forge: &'static str },
    /// It answered, but not with what was asked for.
    #[error("{forge} refused ({status}): {message}")]
    Refused {
        forge: &'static str,
        status: u16,
        message: String,
    },
}

/// Sends `request` to `forge` and reads its answer, whatever its status.
pub async fn call(forge: &Forge, request: reqwest::RequestBuilder) -> Result<Answer, CallError> {
    let name = forge.kind.name();
    let unreachable = |e: reqwest::Error| CallError::Unreachable {
        forge: name,
        message: e.without_url().to_string(),
    };
    let mut response = request.send().await.map_err(unreachable)?;
    let status = response.status().as_u16();
    if response
        .content_length()
        .is_some_and(|len| len > MAX_ANSWER as u64)
    {
        return Err(CallError::TooLarge { forge: name });
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
        if body.len() + chunk.len() > MAX_ANSWER {
            return Err(CallError::TooLarge { forge: name });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Answer {
        status,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn answer(body: Value) -> Answer {
        Answer { status: 422, body }
    }

    #[test]
    fn a_forges_words_are_read_from_each_shape() {
        assert_eq!(answer(json!({"message": "Bad"})).message(), "Bad");
        assert_eq!(
            answer(json!({"message": "Validation Failed", "errors": [{"message": "exists"}, "x"]}))
                .message(),
            "Validation Failed; exists; x"
        );
        assert_eq!(answer(json!({"message": ["a", "b"]})).message(), "a; b");
        assert_eq!(
            answer(json!({"error": "insufficient_scope"})).message(),
            "insufficient_scope"
        );
        assert_eq!(answer(Value::Null).message(), "no details");
        assert_eq!(
            answer(json!({"message": "a\u{1b}[31mb\0c"})).message(),
            "a[31mbc"
        );
        let long = "x".repeat(10_000);
        assert_eq!(
            answer(json!({ "message": long })).message().len(),
            MAX_MESSAGE
        );
    }
}
