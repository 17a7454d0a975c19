//! Boards linked to an issue tracker (a GitHub repository or a GitLab
//! project, on a forge of `KANDEV_FORGES` of that kind): its issues
//! (with the link's label) become the board's tasks, by webhook and by a
//! periodic reconcile, one task per issue whichever comes first (the
//! store's claim); an edited issue updates its task; a closed one cancels
//! its task if it has not started. A task made of an issue opens its pull
//! (or merge) request with "Closes #N", and the issue gets a comment (a
//! note on GitLab) with the link.

use std::{collections::HashMap, time::Duration};

use chrono::{DateTime, Utc};
use kandev_events::TaskState;
use kandev_proto::v1 as pb;
use secrecy::{ExposeSecret, SecretString};
use serde_json::json;
use uuid::Uuid;

use super::{ACTOR, Engine, task_state};
use crate::{
    domain::{OrchestratorError, Result},
    engine::store::{TrackerIssueRow, TrackerLinkRow},
    forge::{self, Forge, ForgeKind},
    tracker::{self, Issue, IssueEvent, TrackerError},
};

/// The longest title a task made of an issue gets (in characters).
const MAX_TITLE: usize = 200;
/// The longest issue body a task's description quotes.
const MAX_BODY: usize = 20_000;
/// The longest wait between reconciles of a failing link.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);

/// What a webhook delivery or a reconciled issue did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Created(Uuid),
    Updated(Uuid),
    Cancelled(Uuid),
    Ignored,
}

impl Applied {
    pub fn to_proto(self) -> pb::TrackerWebhookResponse {
        let (outcome, task) = match self {
            Applied::Created(t) => ("created", Some(t)),
            Applied::Updated(t) => ("updated", Some(t)),
            Applied::Cancelled(t) => ("cancelled", Some(t)),
            Applied::Ignored => ("ignored", None),
        };
        pb::TrackerWebhookResponse {
            outcome: outcome.into(),
            task_id: task.map(|t| t.to_string()).unwrap_or_default(),
        }
    }
}

/// A link as asked for, checked.
pub fn link_from_proto(r: pb::SetTrackerLinkRequest, forges: &[Forge]) -> Result<TrackerLinkRow> {
    let board_id = Uuid::parse_str(&r.board_id)
        .map_err(|_| OrchestratorError::BadRequest(format!("invalid board id {:?}", r.board_id)))?;
    let invalid = |m: String| Err(OrchestratorError::Validation(m));
    let Some(kind) = tracker_kind(&r.kind) else {
        return invalid(format!("kind must be github or gitlab, not {:?}", r.kind));
    };
    let url = r.repository_url.trim();
    let Some(forge) = forge::forge_for(forges, url).filter(|f| f.kind == kind) else {
        return invalid(format!(
            "no {} forge is configured for {url:?} (KANDEV_FORGES)",
            kind.name()
        ));
    };
    let Some(repository) = forge::project_path(forge, url).filter(|p| safe_path(p)) else {
        return invalid(format!("{url:?} names no owner/repo on its forge"));
    };
    let label = r.label.trim();
    if label.chars().count() > 100 || label.chars().any(char::is_control) {
        return invalid("label must be at most 100 characters, without control characters".into());
    }
    if r.webhook_secret.len() > 256 || r.webhook_secret.chars().any(char::is_control) {
        return invalid(
            "webhook_secret must be at most 256 characters, without control characters".into(),
        );
    }
    let agent_type = r.agent_type.trim();
    if agent_type.len() > 100 {
        return invalid("agent_type must be at most 100 characters".into());
    }
    let token_secret = r.token_secret.trim();
    if token_secret.len() > 128 || token_secret.chars().any(char::is_control) {
        return invalid("token_secret must be a secret's name".into());
    }
    Ok(TrackerLinkRow {
        board_id,
        kind: r.kind,
        repository_url: url.to_string(),
        repository,
        label: label.to_string(),
        agent_type: agent_type.to_string(),
        webhook_secret: r.webhook_secret,
        token_secret: token_secret.to_string(),
        created_by: r.created_by,
        last_error: String::new(),
        last_synced_at: None,
        created_at: Utc::now(),
    })
}

/// The forge kind a link's `kind` names.
fn tracker_kind(kind: &str) -> Option<ForgeKind> {
    [ForgeKind::Github, ForgeKind::Gitlab]
        .into_iter()
        .find(|k| k.as_str() == kind)
}

/// `owner/repo` with nothing a URL path would read otherwise.
fn safe_path(path: &str) -> bool {
    path.split('/').all(|seg| {
        !seg.is_empty()
            && seg != "."
            && seg != ".."
            && seg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    })
}

/// A link on the wire, its secret left out.
pub fn link_to_proto(l: &TrackerLinkRow) -> pb::TrackerLink {
    pb::TrackerLink {
        board_id: l.board_id.to_string(),
        kind: l.kind.clone(),
        repository_url: l.repository_url.clone(),
        repository: l.repository.clone(),
        label: l.label.clone(),
        agent_type: l.agent_type.clone(),
        token_secret: l.token_secret.clone(),
        has_webhook_secret: !l.webhook_secret.is_empty(),
        created_by: l.created_by.clone(),
        last_error: l.last_error.clone(),
        last_synced_at: l.last_synced_at.map(kandev_proto::time::from_chrono),
        created_at: Some(kandev_proto::time::from_chrono(l.created_at)),
    }
}

/// The first `max` characters of `s`.
fn cut(s: &str, max: usize) -> &str {
    s.char_indices().nth(max).map_or(s, |(i, _)| &s[..i])
}

/// A task's description made of an issue: its body, then the link back.
fn description(issue: &Issue) -> String {
    let body = cut(issue.body.trim(), MAX_BODY);
    if body.is_empty() {
        format!("From {}", issue.url)
    } else {
        format!("{body}\n\nFrom {}", issue.url)
    }
}

/// How long a link waits before its next reconcile after `failures`
/// failures in a row.
pub fn backoff(interval: Duration, failures: u32) -> Duration {
    interval
        .saturating_mul(2u32.saturating_pow(failures.min(16)))
        .min(MAX_BACKOFF.max(interval))
}

impl Engine {
    /// The forge of a link's kind, or why there is none; its token is the
    /// linking user's secret the link names, else the forge's.
    async fn link_forge(&self, link: &TrackerLinkRow) -> std::result::Result<Forge, String> {
        let kind = tracker_kind(&link.kind)
            .ok_or_else(|| format!("the link's kind {:?} is not a tracker", link.kind))?;
        let forge = forge::forge_for(&self.settings.forges, &link.repository_url)
            .filter(|f| f.kind == kind)
            .ok_or_else(|| {
                format!(
                    "no {} forge is configured for {} any more (KANDEV_FORGES)",
                    kind.name(),
                    link.repository_url
                )
            })?;
        if link.token_secret.is_empty() {
            return Ok(forge.clone());
        }
        let token = self.link_token(link).await.map_err(|e| e.to_string())?;
        Ok(Forge {
            token: token.expose_secret().to_string(),
            ..forge.clone()
        })
    }

    /// The linking user's secret a link names (only theirs): a plain
    /// error, naming it, when they have none of that name.
    async fn link_token(&self, link: &TrackerLinkRow) -> Result<SecretString> {
        self.agents
            .open_user_secret(&link.created_by, &link.token_secret)
            .await
            .map_err(|status| match status.code() {
                tonic::Code::NotFound => OrchestratorError::Validation(format!(
                    "token_secret: {} has no secret named {:?}",
                    link.created_by, link.token_secret
                )),
                _ => OrchestratorError::upstream("agent manager")(status),
            })
    }

    /// Links a board (which must exist) to its tracker, or replaces its
    /// link; the next reconcile reads it at once.
    #[tracing::instrument(skip_all, fields(board_id = %link.board_id, repository = %link.repository))]
    pub(crate) async fn set_tracker_link(&self, link: TrackerLinkRow) -> Result<TrackerLinkRow> {
        self.board_owner(&link.board_id.to_string()).await?;
        if !link.token_secret.is_empty() {
            self.link_token(&link).await?;
        }
        let stored = self.store.put_tracker_link(&link).await?;
        tracing::info!("board linked to its tracker");
        Ok(stored)
    }

    pub(crate) async fn tracker_link(&self, board_id: Uuid) -> Result<TrackerLinkRow> {
        self.store
            .tracker_link(board_id)
            .await?
            .ok_or_else(|| OrchestratorError::NotFound("the board has no tracker link".into()))
    }

    #[tracing::instrument(skip(self))]
    pub(crate) async fn delete_tracker_link(&self, board_id: Uuid) -> Result<()> {
        if self.store.delete_tracker_link(board_id).await? {
            Ok(())
        } else {
            Err(OrchestratorError::NotFound(
                "the board has no tracker link".into(),
            ))
        }
    }

    /// A webhook delivery: refused unless its proof (GitHub's signature,
    /// GitLab's token) is that of a linked board's secret (checked before
    /// the payload is read); then its issue event is applied to every
    /// board linked to that repository with that secret.
    #[tracing::instrument(skip_all, fields(%kind, %event))]
    pub(crate) async fn tracker_webhook(
        &self,
        kind: &str,
        event: &str,
        proof: &str,
        payload: &[u8],
    ) -> Result<Applied> {
        let refused =
            || OrchestratorError::Unauthenticated("the webhook's signature is not valid".into());
        let Some(forge_kind) = tracker_kind(kind) else {
            return Err(OrchestratorError::NotFound(format!(
                "no tracker of kind {kind:?}"
            )));
        };
        let signature = match forge_kind {
            ForgeKind::Github => Some(tracker::parse_signature(proof).ok_or_else(refused)?),
            ForgeKind::Gitlab => None,
        };
        let proven = |secret: &str| match &signature {
            Some(signature) => tracker::signature_matches(secret, payload, signature),
            None => tracker::token_matches(secret, proof),
        };
        let links: Vec<TrackerLinkRow> = self
            .store
            .tracker_links()
            .await?
            .into_iter()
            .filter(|l| l.kind == kind && proven(&l.webhook_secret))
            .collect();
        if links.is_empty() {
            tracing::warn!("a webhook delivery with a bad signature was refused");
            return Err(refused());
        }
        let delivery = match forge_kind {
            ForgeKind::Github if event == "issues" => IssueEvent::parse(payload),
            ForgeKind::Gitlab if event == tracker::ISSUE_HOOK => IssueEvent::parse_gitlab(payload),
            _ => return Ok(Applied::Ignored),
        }
        .map_err(OrchestratorError::Validation)?;
        let mut outcome = Applied::Ignored;
        for link in links
            .iter()
            .filter(|l| l.repository.eq_ignore_ascii_case(&delivery.repository))
        {
            outcome = self.apply_issue(link, &delivery.issue).await?;
        }
        tracing::info!(action = %delivery.action, number = delivery.issue.number, ?outcome, "webhook delivery applied");
        Ok(outcome)
    }

    /// Makes, updates or cancels the task of `issue` on the link's board.
    async fn apply_issue(&self, link: &TrackerLinkRow, issue: &Issue) -> Result<Applied> {
        if issue.pull_request {
            return Ok(Applied::Ignored);
        }
        let board = link.board_id;
        let Some(known) = self.store.tracker_issue(board, issue.number).await? else {
            if !issue.open || !issue.has_label(&link.label) {
                return Ok(Applied::Ignored);
            }
            return self.make_issue_task(link, issue).await;
        };
        // Being made by someone else, or its task made.
        let Some(task_id) = known.task_id else {
            return Ok(Applied::Ignored);
        };
        let task = match self.get_task(task_id).await {
            Ok(task) => task,
            // The task was deleted: the issue stays done with.
            Err(OrchestratorError::Upstream { status, .. })
                if status.code() == tonic::Code::NotFound =>
            {
                return Ok(Applied::Ignored);
            }
            Err(e) => return Err(e),
        };
        if !issue.open {
            if task_state(&task)? != TaskState::Todo {
                return Ok(Applied::Ignored);
            }
            self.change_task_state(
                task_id,
                pb::TaskState::Cancelled,
                "its issue was closed",
                None,
            )
            .await?;
            tracing::info!(%task_id, number = issue.number, "issue closed: task cancelled");
            return Ok(Applied::Cancelled(task_id));
        }
        let title = cut(issue.title.trim(), MAX_TITLE);
        let description = description(issue);
        if task.title == title && task.description == description {
            return Ok(Applied::Ignored);
        }
        self.tasks
            .clone()
            .update_task(pb::UpdateTaskRequest {
                id: task_id.to_string(),
                title: Some(title.to_string()),
                description: Some(description),
                actor: ACTOR.into(),
                ..Default::default()
            })
            .await
            .map_err(OrchestratorError::upstream("task service"))?;
        Ok(Applied::Updated(task_id))
    }

    /// The task of an issue no one claimed yet.
    async fn make_issue_task(&self, link: &TrackerLinkRow, issue: &Issue) -> Result<Applied> {
        let board = link.board_id;
        if !self
            .store
            .claim_issue(board, issue.number, &issue.url)
            .await?
        {
            return Ok(Applied::Ignored);
        }
        let created = self
            .tasks
            .clone()
            .create_task(pb::CreateTaskRequest {
                board_id: board.to_string(),
                title: cut(issue.title.trim(), MAX_TITLE).to_string(),
                description: description(issue),
                agent_type: Some(link.agent_type.clone()).filter(|a| !a.is_empty()),
                repository_url: link.repository_url.clone(),
                metadata_json: json!({"tracker": {
                    "kind": link.kind, "repository": link.repository,
                    "issue": issue.number, "url": issue.url,
                }})
                .to_string(),
                created_by: link.created_by.clone(),
                ..Default::default()
            })
            .await
            .map_err(OrchestratorError::upstream("task service"));
        let task = match created {
            Ok(task) => task.into_inner(),
            Err(err) => {
                self.store.release_issue(board, issue.number).await?;
                return Err(err);
            }
        };
        let task_id = Uuid::parse_str(&task.id)
            .map_err(|_| OrchestratorError::Internal(format!("a task id {:?}", task.id)))?;
        self.store
            .issue_task_made(board, issue.number, task_id)
            .await?;
        tracing::info!(%task_id, number = issue.number, "issue became a task");
        Ok(Applied::Created(task_id))
    }

    /// Reads the link's issues and applies each; the outcome (a plain
    /// error, or none) is recorded on the link. Whether it went well.
    #[tracing::instrument(skip_all, fields(board_id = %link.board_id))]
    pub async fn reconcile_tracker(&self, link: &TrackerLinkRow) -> Result<bool> {
        let outcome = match self.link_forge(link).await {
            Ok(forge) => {
                let client = tracker::http_client();
                match tracker::list_issues(&client, &forge, &link.repository, &link.label).await {
                    Ok(issues) => self.apply_issues(link, &issues).await,
                    Err(e) => Err(e.to_string()),
                }
            }
            Err(e) => Err(e),
        };
        let error = outcome.as_ref().err().cloned().unwrap_or_default();
        if !error.is_empty() {
            tracing::warn!(%error, "reconciling a tracker link failed");
        }
        self.store
            .tracker_synced(link.board_id, &error, Utc::now())
            .await?;
        Ok(error.is_empty())
    }

    /// Applies the issues oldest first; the first failure stops.
    async fn apply_issues(
        &self,
        link: &TrackerLinkRow,
        issues: &[Issue],
    ) -> std::result::Result<(), String> {
        for issue in issues.iter().rev() {
            self.apply_issue(link, issue).await.map_err(|e| match e {
                OrchestratorError::Upstream { status, .. }
                    if status.code() == tonic::Code::NotFound =>
                {
                    "the board was not found: delete this link".to_string()
                }
                e => format!("issue #{}: {e}", issue.number),
            })?;
        }
        Ok(())
    }

    /// Reconciles every link whose time has come (never synced, or synced
    /// longer ago than the interval, doubled per failure in a row).
    pub async fn reconcile_due_trackers(
        &self,
        failures: &mut HashMap<Uuid, u32>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let interval = Duration::from_secs(self.settings.tracker_reconcile_secs.max(1));
        let links = self.store.tracker_links().await?;
        failures.retain(|board, _| links.iter().any(|l| l.board_id == *board));
        for link in links {
            let failed = failures.get(&link.board_id).copied().unwrap_or(0);
            let wait = backoff(interval, failed);
            let due = link
                .last_synced_at
                .is_none_or(|at| (now - at).to_std().unwrap_or_default() >= wait);
            if !due {
                continue;
            }
            if self.reconcile_tracker(&link).await? {
                failures.remove(&link.board_id);
            } else {
                *failures.entry(link.board_id).or_default() += 1;
            }
        }
        Ok(())
    }

    /// The issue a task was made of and its link, if the link is still
    /// there.
    pub(crate) async fn issue_of_task(
        &self,
        task_id: Uuid,
    ) -> Option<(TrackerIssueRow, TrackerLinkRow)> {
        let issue = self.store.issue_of_task(task_id).await.ok().flatten()?;
        let link = self
            .store
            .tracker_link(issue.board_id)
            .await
            .ok()
            .flatten()?;
        Some((issue, link))
    }

    /// "Closes #N" for a pull (or merge) request on `repository_url`: the
    /// issue's repository named when the request is elsewhere on the same
    /// forge (both GitHub and GitLab read `owner/repo#N`), the issue's URL
    /// when on another forge (which only links it).
    pub(crate) fn closes_line(
        &self,
        repository_url: &str,
        issue: &TrackerIssueRow,
        link: &TrackerLinkRow,
    ) -> String {
        let forges = &self.settings.forges;
        let forge = forge::forge_for(forges, repository_url);
        let same_forge = forge.is_some_and(|f| {
            f.kind.as_str() == link.kind
                && forge::forge_for(forges, &link.repository_url)
                    .is_some_and(|l| l.repository_prefix == f.repository_prefix)
        });
        let same_project = forge
            .and_then(|f| forge::project_path(f, repository_url))
            .is_some_and(|p| p.eq_ignore_ascii_case(&link.repository));
        match (same_forge, same_project) {
            (true, true) => format!("Closes #{}", issue.number),
            (true, false) => format!("Closes {}#{}", link.repository, issue.number),
            (false, _) => format!("Closes {}", issue.url),
        }
    }

    /// Tells the issue its pull request is open; a failure is logged (the
    /// pull request is open either way).
    pub(crate) async fn comment_pull_request(
        &self,
        issue: &TrackerIssueRow,
        link: &TrackerLinkRow,
        pull_request: &str,
    ) {
        let result = match self.link_forge(link).await {
            Ok(forge) => tracker::comment(
                &tracker::http_client(),
                &forge,
                &link.repository,
                issue.number,
                &format!(
                    "Kandev opened a {} for this issue: {pull_request}",
                    match forge.kind {
                        ForgeKind::Github => "pull request",
                        ForgeKind::Gitlab => "merge request",
                    }
                ),
            )
            .await
            .map_err(|e: TrackerError| e.to_string()),
            Err(e) => Err(e),
        };
        if let Err(error) = result {
            tracing::warn!(number = issue.number, %error, "cannot comment on the issue");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forges() -> Vec<Forge> {
        vec![Forge {
            repository_prefix: "https://github.com/".into(),
            kind: ForgeKind::Github,
            api_url: "https://api.github.com".into(),
            token: "t".into(),
        }]
    }

    fn request(url: &str) -> pb::SetTrackerLinkRequest {
        pb::SetTrackerLinkRequest {
            board_id: Uuid::now_v7().to_string(),
            kind: "github".into(),
            repository_url: url.into(),
            label: "kandev".into(),
            webhook_secret: "s".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_link_names_a_repository_on_a_configured_forge() {
        let link = link_from_proto(request("https://github.com/acme/app.git"), &forges()).unwrap();
        assert_eq!(link.repository, "acme/app");
        for bad in [
            "https://gitlab.com/acme/app",
            "https://github.com/acme",
            "https://github.com/acme/../x",
            "https://github.com/acme/a?b",
        ] {
            assert!(
                matches!(
                    link_from_proto(request(bad), &forges()),
                    Err(OrchestratorError::Validation(_))
                ),
                "{bad}"
            );
        }
        let mut other = request("https://github.com/acme/app");
        other.kind = "jira".into();
        assert!(link_from_proto(other, &forges()).is_err());
        assert!(!format!("{link:?}").contains("\"s\""));
    }

    #[test]
    fn a_failing_link_waits_longer_up_to_an_hour() {
        let minute = Duration::from_secs(60);
        assert_eq!(backoff(minute, 0), minute);
        assert_eq!(backoff(minute, 2), minute * 4);
        assert_eq!(backoff(minute, 30), MAX_BACKOFF);
    }
}
