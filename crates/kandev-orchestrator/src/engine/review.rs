//! The review loop of a task in REVIEW: the reviewer's comments go back to
//! the agent as a follow-up prompt in the same session (the task returns to
//! IN_PROGRESS), or the approval delivers the work (commit on the task's
//! branch, push, pull request or merge) and completes the task. A task that
//! finished straight to COMPLETED is delivered the same way, staying
//! COMPLETED.

use std::fmt::Write as _;

use kandev_events::TaskState;
use kandev_proto::v1 as pb;
use serde_json::json;
use uuid::Uuid;

use super::{Engine, task_state};
use crate::domain::{ExecutionView, Orchestration, OrchestratorError, Result};

/// One comment of a review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewComment {
    /// The file commented on; empty: the whole change.
    pub path: String,
    pub line: Option<u32>,
    pub body: String,
}

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
                    .map(|c| ReviewComment {
                        path: c.path,
                        line: u32::try_from(c.line).ok().filter(|l| *l > 0),
                        body: c.body,
                    })
                    .collect(),
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
            let place = match (c.path.trim(), c.line) {
                ("", _) => "The whole change".to_string(),
                (path, Some(line)) => format!("{path}, line {line}"),
                (path, None) => path.to_string(),
            };
            let _ = writeln!(prompt, "- {place}: {}", c.body.trim());
        }
    }
    prompt.push_str("\nPlease make these changes in the workspace.");
    Ok(prompt)
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
                let prompt = review_prompt(&comments, &message)?;
                tracing::info!(%task_id, comments = comments.len(), "changes requested");
                let execution = self.start_task(task_id, Some(prompt), &actor).await?;
                Ok(ReviewOutcome {
                    execution,
                    delivery: None,
                    pull_request: None,
                })
            }
            Review::Approve {
                message,
                author,
                email,
                merge,
            } => {
                let reviewer = author.clone();
                let message = if message.trim().is_empty() {
                    commit_message(&task)
                } else {
                    message
                };
                let forge = crate::forge::forge_for(&self.settings.forges, &task.repository_url);
                let delivery = self
                    .agents
                    .deliver(pb::DeliverChangesRequest {
                        task_id: task_id.to_string(),
                        message,
                        author_name: author,
                        author_email: email,
                        push: true,
                        merge,
                        // A forge's token pushes over https too.
                        push_auth: forge.map(crate::forge::push_auth).unwrap_or_default(),
                    })
                    .await
                    .map_err(OrchestratorError::upstream("agent manager"))?;
                tracing::info!(%task_id, branch = %delivery.branch, commit = %delivery.commit, "approved and delivered");
                // On a forge: a pull request of the pushed branch. A failure
                // leaves the task in review, with the forge's reason.
                let pull_request = match forge {
                    Some(forge) if !delivery.pushed_to.is_empty() => {
                        let base = if delivery.base_branch.is_empty() {
                            task.branch.as_str()
                        } else {
                            delivery.base_branch.as_str()
                        };
                        let body = format!(
                            "{}\n\nOpened by Kandev for task {task_id}, approved by {reviewer}.",
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
                        Some(opened.url)
                    }
                    _ => None,
                };
                let patch = json!({
                        "delivered": {
                            "branch": delivery.branch,
                            "commit": delivery.commit,
                            "pushed_to": delivery.pushed_to,
                            "pull_request": pull_request,
                        }
                });
                if state == TaskState::Review {
                    self.change_task_state(
                        task_id,
                        pb::TaskState::Completed,
                        "approved",
                        Some(patch),
                    )
                    .await?;
                } else {
                    self.record_metadata(task_id, &patch).await;
                }
                // Delivered: the clone has done its job.
                if self.settings.remove_workspace_after_delivery && !delivery.pushed_to.is_empty() {
                    self.remove_workspace(task_id, "delivered").await;
                }
                Ok(ReviewOutcome {
                    execution: self.get_execution(task_id).await?,
                    delivery: Some(delivery),
                    pull_request,
                })
            }
        }
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

    #[test]
    fn a_review_becomes_a_prompt_with_file_and_line() {
        let prompt = review_prompt(
            &[
                ReviewComment {
                    path: "src/lib.rs".into(),
                    line: Some(12),
                    body: "Handle the empty case.".into(),
                },
                ReviewComment {
                    path: String::new(),
                    line: None,
                    body: "Add a test.".into(),
                },
                ReviewComment {
                    path: "x".into(),
                    line: None,
                    body: "  ".into(),
                },
            ],
            "Close, but not yet.",
        )
        .unwrap();
        assert!(prompt.contains("Close, but not yet."), "{prompt}");
        assert!(
            prompt.contains("- src/lib.rs, line 12: Handle the empty case."),
            "{prompt}"
        );
        assert!(
            prompt.contains("- The whole change: Add a test."),
            "{prompt}"
        );
        assert!(!prompt.contains("- x"), "{prompt}");
        assert!(review_prompt(&[], " ").is_err());
    }
}
