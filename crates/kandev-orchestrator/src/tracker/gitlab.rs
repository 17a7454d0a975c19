//! GitLab's side of the issue tracker (REST API v4): a project's issues
//! (`GET /projects/:id/issues`, the project's path URL-encoded as its id),
//! notes on an issue (`POST /projects/:id/issues/:iid/notes`), and the
//! `Issue Hook` webhook deliveries, whose `X-Gitlab-Token` is the link's
//! secret itself (compared in constant time).

use serde_json::Value;

use super::{Issue, IssueEvent, PER_PAGE};
use crate::forge::{Forge, api, urlencoding};

/// The event header's value for issue deliveries.
pub const ISSUE_HOOK: &str = "Issue Hook";

impl Issue {
    /// Parses GitLab's issue object (REST API v4); what is missing or
    /// mistyped is an error, never a default.
    pub fn from_gitlab(v: &Value) -> Result<Issue, String> {
        let number = v["iid"].as_i64().ok_or("an issue without an iid")?;
        let labels = v["labels"]
            .as_array()
            .map(|ls| {
                ls.iter()
                    .filter_map(|l| l.as_str().or_else(|| l["name"].as_str()))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        gitlab_issue(number, v, &v["web_url"], v["state"].as_str(), labels)
    }
}

/// An issue from GitLab's fields (`description` may be null).
fn gitlab_issue(
    number: i64,
    v: &Value,
    url: &Value,
    state: Option<&str>,
    labels: Vec<String>,
) -> Result<Issue, String> {
    let text = |value: &Value, key: &str| -> Result<String, String> {
        match value {
            Value::String(s) => Ok(s.clone()),
            Value::Null if key == "description" => Ok(String::new()),
            _ => Err(format!("issue {number} has no {key}")),
        }
    };
    let open = match state {
        Some("opened" | "reopened") => true,
        Some("closed") => false,
        other => return Err(format!("issue {number} has the unknown state {other:?}")),
    };
    Ok(Issue {
        number,
        title: text(&v["title"], "title")?,
        body: text(&v["description"], "description")?,
        url: text(url, "url")?,
        open,
        labels,
        pull_request: false,
    })
}

impl IssueEvent {
    /// What a GitLab `Issue Hook` delivery says (`object_kind: issue`).
    pub fn parse_gitlab(payload: &[u8]) -> Result<IssueEvent, String> {
        let v: Value =
            serde_json::from_slice(payload).map_err(|e| format!("the payload is not JSON: {e}"))?;
        if v["object_kind"] != "issue" {
            return Err(format!(
                "the payload is not an issue event (object_kind {})",
                v["object_kind"]
            ));
        }
        let attributes = &v["object_attributes"];
        let number = attributes["iid"]
            .as_i64()
            .ok_or("the payload's issue has no iid")?;
        let labels = v["labels"]
            .as_array()
            .map(|ls| {
                ls.iter()
                    .filter_map(|l| l["title"].as_str())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let issue = gitlab_issue(
            number,
            attributes,
            &attributes["url"],
            attributes["state"].as_str(),
            labels,
        )?;
        Ok(IssueEvent {
            action: attributes["action"]
                .as_str()
                .unwrap_or("update")
                .to_string(),
            repository: v["project"]["path_with_namespace"]
                .as_str()
                .ok_or("the payload names no project")?
                .to_string(),
            issue,
        })
    }
}

fn request(
    client: &reqwest::Client,
    forge: &Forge,
    method: reqwest::Method,
    project: &str,
    path: &str,
) -> reqwest::RequestBuilder {
    let api = forge.api_url.trim_end_matches('/');
    let url = format!("{api}/projects/{}{path}", urlencoding(project));
    api::request(client, forge, method, &url)
}

/// One page of a project's issues with `label` (any when empty), open and
/// closed, most recently updated first.
pub(super) fn issues_page(
    client: &reqwest::Client,
    forge: &Forge,
    project: &str,
    label: &str,
    page: u32,
) -> reqwest::RequestBuilder {
    let mut query = vec![
        ("state", "all".to_string()),
        ("order_by", "updated_at".to_string()),
        ("sort", "desc".to_string()),
        ("per_page", PER_PAGE.to_string()),
        ("page", page.to_string()),
    ];
    if !label.is_empty() {
        query.push(("labels", label.to_string()));
    }
    request(client, forge, reqwest::Method::GET, project, "/issues").query(&query)
}

/// A note on issue `iid` (its body is the request's JSON `body`).
pub(super) fn note_request(
    client: &reqwest::Client,
    forge: &Forge,
    project: &str,
    iid: i64,
) -> reqwest::RequestBuilder {
    request(
        client,
        forge,
        reqwest::Method::POST,
        project,
        &format!("/issues/{iid}/notes"),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_gitlab_issue_is_parsed_strictly() {
        let issue = Issue::from_gitlab(&json!({
            "iid": 3, "id": 901, "title": "Fix it", "description": null, "state": "opened",
            "web_url": "https://gitlab.example/g/p/-/issues/3", "labels": ["kandev", "bug"]
        }))
        .unwrap();
        assert_eq!((issue.number, issue.body.as_str()), (3, ""));
        assert!(issue.open && issue.has_label("kandev") && !issue.has_label("x"));
        assert!(
            !Issue::from_gitlab(
                &json!({"iid": 3, "title": "x", "web_url": "u", "state": "closed"})
            )
            .unwrap()
            .open
        );
        for bad in [
            json!({"iid": 3, "title": "x", "web_url": "u", "state": "locked"}),
            json!({"iid": 3, "web_url": "u", "state": "opened"}),
            json!({"title": "x", "web_url": "u", "state": "opened"}),
        ] {
            assert!(Issue::from_gitlab(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_issue_hook_is_parsed() {
        let payload = json!({
            "object_kind": "issue", "event_type": "issue",
            "project": {"path_with_namespace": "group/app"},
            "object_attributes": {"iid": 5, "title": "T", "description": "D",
                "state": "closed", "action": "close", "url": "https://gitlab.example/group/app/-/issues/5"},
            "labels": [{"id": 1, "title": "kandev"}]
        });
        let event = IssueEvent::parse_gitlab(payload.to_string().as_bytes()).unwrap();
        assert_eq!(event.repository, "group/app");
        assert_eq!(event.action, "close");
        assert!(!event.issue.open && event.issue.has_label("kandev"));
        assert_eq!(
            event.issue.url,
            "https://gitlab.example/group/app/-/issues/5"
        );
        let push = json!({"object_kind": "push", "project": {"path_with_namespace": "g/a"}});
        assert!(IssueEvent::parse_gitlab(push.to_string().as_bytes()).is_err());
        assert!(IssueEvent::parse_gitlab(b"not json").is_err());
    }
}
