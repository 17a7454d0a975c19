//! The review loop of a task in REVIEW: the reviewer's comments go back to
//! the agent as a follow-up prompt in the same session (the task returns to
//! IN_PROGRESS), or the approval delivers the work (commit on the task's
//! branch, push, pull request or merge) and completes the task. A task that
//! finished straight to COMPLETED is delivered the same way, staying
//! COMPLETED.
//!
//! The comments of each request for changes are kept (the store's
//! `review_comments`), as the task's next round, with the general message
//! first: the diff shows them on later rounds, and each can be resolved.

use std::fmt::Write as _;

use chrono::Utc;
use kandev_events::TaskState;
use kandev_proto::v1 as pb;
use serde_json::json;
use uuid::Uuid;

pub use super::store::{NewReviewComment as ReviewComment, ReviewCommentRow, Side};
use super::{Engine, task_state};
use crate::domain::{ExecutionView, OrchestratorError, Result};

/// What the reviewer decided.
#[derive(Debug, Clone)]
pub enum Review {
    RequestChanges {
        comments: Vec<ReviewComment>,
        message: String,
        /// Who asked: the follow-up's run, if one starts, is theirs.
        actor: String,
    },
    Approve {
        /// The commit message; empty: one from the task.
        message: String,
        author: String,
        email: String,
        /// Merge into the base on the remote instead of a pull request.
        merge: bool,
    },
}

impl Review {
    /// Parses the wire form (`action` is `request_changes` or `approve`).
    pub fn from_proto(r: pb::ReviewTaskRequest) -> Result<Review> {
        match r.action.as_str() {
            "request_changes" => Ok(Review::RequestChanges {
                comments: r
                    .comments
                    .into_iter()
                    .map(|c| {
                        let line = u32::try_from(c.line).ok().filter(|l| *l > 0);
                        Ok(ReviewComment {
                            side: match c.side.as_str() {
                                "" => Side::New,
                                side => Side::parse(side).map_err(OrchestratorError::Validation)?,
                            },
                            line_text: if line.is_some() {
                                c.line_text
                            } else {
                                String::new()
                            },
                            path: c.path,
                            line,
                            body: c.body,
                        })
                    })
                    .collect::<Result<_>>()?,
                message: r.message,
                actor: r.actor,
            }),
            "approve" => Ok(Review::Approve {
                message: r.message,
                author: r.actor,
                email: r.actor_email,
                merge: r.merge,
            }),
            other => Err(OrchestratorError::Validation(format!(
                "action must be request_changes or approve, not {other:?}"
            ))),
        }
    }
}

/// The outcome of a review.
#[derive(Debug, Clone)]
pub struct ReviewOutcome {
    pub execution: ExecutionView,
    /// What approval delivered.
    pub delivery: Option<pb::Delivery>,
    /// The pull request approval opened.
    pub pull_request: Option<String>,
}

/// The follow-up prompt that carries a review to the agent.
pub fn review_prompt(comments: &[ReviewComment], message: &str) -> Result<String> {
    let comments: Vec<&ReviewComment> = comments
        .iter()
        .filter(|c| !c.body.trim().is_empty())
        .collect();
    if comments.is_empty() && message.trim().is_empty() {
        return Err(OrchestratorError::Validation(
            "request_changes needs a message or at least one comment".into(),
        ));
    }
    let mut prompt = String::from("A reviewer asked for changes to your work on this task.\n");
    if !message.trim().is_empty() {
        let _ = write!(prompt, "\n{}\n", message.trim());
    }
    if !comments.is_empty() {
        prompt.push_str("\nComments:\n");
        for c in comments {
            let place = match (c.path.trim(), c.line, c.side) {
                ("", _, _) => "The whole change".to_string(),
                (path, Some(line), Side::New) => format!("{path}, line {line}"),
                (path, Some(line), Side::Old) => format!("{path}, removed line {line}"),
                (path, None, _) => path.to_string(),
            };
            let _ = writeln!(prompt, "- {place}: {}", c.body.trim());
        }
    }
    prompt.push_str("\nPlease make these changes in the workspace.");
    Ok(prompt)
}

/// What a request for changes keeps: its general message (a comment on
/// the whole change) first, then each comment with something to say.
fn kept_comments(comments: Vec<ReviewComment>, message: &str) -> Vec<ReviewComment> {
    let message = message.trim();
    let general = (!message.is_empty()).then(|| ReviewComment {
        path: String::new(),
        line: None,
        side: Side::New,
        line_text: String::new(),
        body: message.to_string(),
    });
    general
        .into_iter()
        .chain(comments.into_iter().filter_map(|c| {
            let body = c.body.trim();
            (!body.is_empty()).then(|| ReviewComment {
                body: body.to_string(),
                ..c
            })
        }))
        .collect()
}

/// A kept comment on the wire.
pub fn comment_to_proto(c: &ReviewCommentRow) -> pb::StoredReviewComment {
    pb::StoredReviewComment {
        id: c.id.to_string(),
        task_id: c.task_id.to_string(),
        round: c.round,
        path: c.path.clone(),
        line: c.line.unwrap_or(0),
        side: c.side.as_str().to_string(),
        line_text: c.line_text.clone(),
        body: c.body.clone(),
        author: c.author.clone(),
        created_at: Some(kandev_proto::time::from_chrono(c.created_at)),
        resolved_by: c.resolved_by.clone().unwrap_or_default(),
        resolved_at: c.resolved_at.map(kandev_proto::time::from_chrono),
    }
}

/// The longest agent summary a suggested commit message quotes.
const MAX_SUMMARY: usize = 4000;

/// The commit message an approval uses when the reviewer gives none: the
/// task's title, the agent's summary of its last run (else the task's
/// description), and the task's id.
pub fn commit_message(task: &pb::Task) -> String {
    let mut message = task.title.trim().to_string();
    let metadata: serde_json::Value =
        serde_json::from_str(&task.metadata_json).unwrap_or(serde_json::Value::Null);
    let summary = metadata["summary"].as_str().unwrap_or_default().trim();
    let body = if summary.is_empty() {
        task.description.trim()
    } else {
        summary
    };
    if !body.is_empty() {
        let cut = body
            .char_indices()
            .nth(MAX_SUMMARY)
            .map_or(body.len(), |(i, _)| i);
        let _ = write!(message, "\n\n{}", &body[..cut]);
    }
    let _ = write!(message, "\n\nKandev task {}", task.id);
    message
}

impl Engine {
    /// The comments kept from the task's requests for changes.
    pub(crate) async fn kept_review_comments(
        &self,
        task_id: Uuid,
    ) -> Result<Vec<ReviewCommentRow>> {
        Ok(self.store.review_comments(task_id).await?)
    }

    /// Resolves a kept comment as `actor`, or (`resolved` false) opens it
    /// again.
    pub(crate) async fn resolve_comment(
        &self,
        task_id: Uuid,
        comment_id: Uuid,
        resolved: bool,
        actor: &str,
    ) -> Result<ReviewCommentRow> {
        if resolved && actor.trim().is_empty() {
            return Err(OrchestratorError::Validation(
                "resolving a comment needs the actor".into(),
            ));
        }
        let by = resolved.then(|| (actor, Utc::now()));
        let comment = self
            .store
            .resolve_review_comment(task_id, comment_id, by)
            .await?
            .ok_or_else(|| OrchestratorError::NotFound("review comment not found".into()))?;
        tracing::info!(%task_id, %comment_id, resolved, "review comment (un)resolved");
        Ok(comment)
    }

    /// Applies a review to a task in REVIEW.
    pub async fn review(&self, task_id: Uuid, review: Review) -> Result<ReviewOutcome> {
        let task = self.get_task(task_id).await?;
        let state = task_state(&task)?;
        // A task in review, or (delivery only) one already completed.
        let allowed = match &review {
            Review::RequestChanges { .. } => state == TaskState::Review,
            Review::Approve { .. } => matches!(state, TaskState::Review | TaskState::Completed),
        };
        if !allowed {
            return Err(OrchestratorError::FailedPrecondition(format!(
                "the task is {}, not in review",
                state.as_str()
            )));
        }
        match review {
            Review::RequestChanges {
                comments,
                message,
                actor,
            } => {
                self.request_changes(task_id, comments, &message, &actor)
                    .await
            }
            Review::Approve {
                message,
                author,
                email,
                merge,
            } => {
                let message = if message.trim().is_empty() {
                    commit_message(&task)
                } else {
                    message
                };
                let request = pb::DeliverChangesRequest {
                    task_id: task_id.to_string(),
                    message,
                    author_name: author,
                    author_email: email,
                    push: true,
                    merge,
                    push_auth: String::new(),
                };
                self.approve(task_id, &task, state, request).await
            }
        }
    }

    /// Keeps the review round and sends its prompt as the next turn; a
    /// round whose turn cannot start is not kept.
    async fn request_changes(
        &self,
        task_id: Uuid,
        comments: Vec<ReviewComment>,
        message: &str,
        actor: &str,
    ) -> Result<ReviewOutcome> {
        let prompt = review_prompt(&comments, message)?;
        let kept = kept_comments(comments, message);
        let round = self.store.add_review_round(task_id, actor, &kept).await?;
        tracing::info!(%task_id, round, comments = kept.len(), "changes requested");
        let execution = match self.start(task_id, Some(prompt), actor).await {
            Ok(execution) => execution,
            Err(err) => {
                if let Err(e) = self.store.forget_review_round(task_id, round).await {
                    tracing::warn!(%task_id, round, error = %e, "cannot forget a review round");
                }
                return Err(err);
            }
        };
        Ok(ReviewOutcome {
            execution,
            delivery: None,
            pull_request: None,
        })
    }

    /// Delivers the task's work (`request`); on a forge, opens its pull
    /// request and watches its checks; then the task is completed with
    /// what was delivered, and the clone, its job done, removed.
    async fn approve(
        &self,
        task_id: Uuid,
        task: &pb::Task,
        state: TaskState,
        mut request: pb::DeliverChangesRequest,
    ) -> Result<ReviewOutcome> {
        let reviewer = request.author_name.clone();
        let forge = crate::forge::forge_for(&self.settings.forges, &task.repository_url);
        // A forge's token pushes over https too.
        request.push_auth = forge.map(crate::forge::push_auth).unwrap_or_default();
        let delivery = self
            .agents
            .deliver(request)
            .await
            .map_err(OrchestratorError::upstream("agent manager"))?;
        tracing::info!(%task_id, branch = %delivery.branch, commit = %delivery.commit, "approved and delivered");
        // On a forge: a pull request of the pushed branch. A failure leaves
        // the task in review, with the forge's reason.
        let pull_request = match forge {
            Some(forge) if !delivery.pushed_to.is_empty() => Some(
                self.open_pull_request(forge, task, &delivery, &reviewer)
                    .await?,
            ),
            _ => None,
        };
        if pull_request.is_some() {
            self.watch_checks(task_id, &task.repository_url, &delivery.commit)
                .await;
        }
        let patch = json!({
            "delivered": {
                "branch": delivery.branch,
                "commit": delivery.commit,
                "pushed_to": delivery.pushed_to,
                "pull_request": pull_request,
            }
        });
        if state == TaskState::Review {
            self.change_task_state(task_id, pb::TaskState::Completed, "approved", Some(patch))
                .await?;
        } else {
            self.record_metadata(task_id, &patch).await;
        }
        if self.settings.remove_workspace_after_delivery && !delivery.pushed_to.is_empty() {
            self.remove_delivered_clone(task_id).await;
        }
        Ok(ReviewOutcome {
            execution: self.execution_view(task_id).await?,
            delivery: Some(delivery),
            pull_request,
        })
    }
}

impl Engine {
    /// The pull request of a delivered branch; a task made of an issue
    /// closes it ("Closes #N"), and the issue is told where it is.
    async fn open_pull_request(
        &self,
        forge: &crate::forge::Forge,
        task: &pb::Task,
        delivery: &pb::Delivery,
        reviewer: &str,
    ) -> Result<String> {
        let task_id = &task.id;
        let base = if delivery.base_branch.is_empty() {
            task.branch.as_str()
        } else {
            delivery.base_branch.as_str()
        };
        let issue = match Uuid::parse_str(task_id) {
            Ok(id) => self.issue_of_task(id).await,
            Err(_) => None,
        };
        let closes = issue
            .as_ref()
            .map(|(i, l)| format!("\n\n{}", self.closes_line(&task.repository_url, i, l)))
            .unwrap_or_default();
        let body = format!(
            "{}\n\nOpened by Kandev for task {task_id}, approved by {reviewer}.{closes}",
            task.description.trim()
        );
        let opened = crate::forge::open_pull_request(
            &self.http,
            forge,
            &crate::forge::PullRequestSpec {
                repository_url: &task.repository_url,
                branch: &delivery.branch,
                base,
                title: &task.title,
                body: body.trim(),
            },
        )
        .await
        .map_err(|e| OrchestratorError::FailedPrecondition(e.to_string()))?;
        tracing::info!(%task_id, url = %opened.url, "pull request opened");
        if let Some((issue, link)) = &issue {
            self.comment_pull_request(issue, link, &opened.url).await;
        }
        Ok(opened.url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suggested_commit_message_quotes_the_agents_summary() {
        let mut task = pb::Task {
            id: "t1".into(),
            title: "Fix the login page".into(),
            description: "The button does nothing.".into(),
            metadata_json: r#"{"summary": "Wired the button to the login call."}"#.into(),
            ..Default::default()
        };
        assert_eq!(
            commit_message(&task),
            "Fix the login page\n\nWired the button to the login call.\n\nKandev task t1"
        );
        task.metadata_json = "{}".into();
        assert_eq!(
            commit_message(&task),
            "Fix the login page\n\nThe button does nothing.\n\nKandev task t1"
        );
    }

    fn comment(path: &str, line: Option<u32>, side: Side, body: &str) -> ReviewComment {
        ReviewComment {
            path: path.into(),
            line,
            side,
            line_text: String::new(),
            body: body.into(),
        }
    }

    #[test]
    fn a_review_becomes_a_prompt_with_file_and_line() {
        let comments = [
            comment("src/lib.rs", Some(12), Side::New, "Handle the empty case."),
            comment("src/lib.rs", Some(3), Side::Old, "Why was this removed?"),
            comment("", None, Side::New, "Add a test."),
            comment("x", None, Side::New, "  "),
        ];
        let prompt = review_prompt(&comments, "Close, but not yet.").unwrap();
        assert!(prompt.contains("Close, but not yet."), "{prompt}");
        assert!(
            prompt.contains("- src/lib.rs, line 12: Handle the empty case."),
            "{prompt}"
        );
        assert!(
            prompt.contains("- src/lib.rs, removed line 3: Why was this removed?"),
            "{prompt}"
        );
        assert!(
            prompt.contains("- The whole change: Add a test."),
            "{prompt}"
        );
        assert!(!prompt.contains("- x"), "{prompt}");
        assert!(review_prompt(&[], " ").is_err());
    }

    #[test]
    fn a_review_keeps_its_message_first_and_no_blank_comment() {
        let kept = kept_comments(
            vec![
                comment("x", None, Side::New, "  "),
                comment("src/lib.rs", Some(12), Side::New, " Handle it. "),
            ],
            " Close, but not yet. ",
        );
        assert_eq!(
            kept,
            [
                comment("", None, Side::New, "Close, but not yet."),
                comment("src/lib.rs", Some(12), Side::New, "Handle it."),
            ]
        );
        assert!(kept_comments(vec![], "").is_empty());
    }

    #[test]
    fn an_unknown_side_is_refused() {
        let request = |side: &str| pb::ReviewTaskRequest {
            action: "request_changes".into(),
            comments: vec![pb::ReviewComment {
                path: "a".into(),
                line: 1,
                body: "b".into(),
                side: side.into(),
                line_text: "fn a()".into(),
            }],
            ..Default::default()
        };
        assert!(matches!(
            Review::from_proto(request("left")),
            Err(OrchestratorError::Validation(_))
        ));
        let Ok(Review::RequestChanges { comments, .. }) = Review::from_proto(request("")) else {
            panic!("a request for changes");
        };
        assert_eq!(comments[0].side, Side::New);
        assert_eq!(comments[0].line_text, "fn a()");
    }
}
