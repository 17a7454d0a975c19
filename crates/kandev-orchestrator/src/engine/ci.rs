//! CI checks of a task's pushed work (issue 42). An approval that pushes
//! the task's branch to a forge watches the pushed commit; the scheduler
//! reads its checks (see [`crate::checks`]) after `checks_poll_ms`, then
//! with a doubling delay while any still runs, at most `checks_max_polls`
//! times, and keeps their summary (`task_checks`). Each change of the
//! overall state is also recorded in the task's metadata (`checks`:
//! `{state, sha}`), so a card shows it without another read.
//!
//! "Fix CI" sends the failing checks' names, conclusions, links and the
//! end of their output to the agent as a follow-up in the same session.
//! With `auto_fix_ci` (or the task's `metadata.auto_fix_ci`), a failure
//! sends it by itself, once per commit.

use std::fmt::Write as _;

use chrono::Utc;
use kandev_proto::v1 as pb;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{ACTOR, Engine};
use crate::{
    checks::{Check, CheckState, read_checks},
    domain::{ExecutionView, OrchestratorError, Result},
    engine::store::{ChecksPoll, TaskChecksRow},
    forge::forge_for,
};

/// Watched commits read per scheduler pass.
const POLL_BATCH: i64 = 20;

/// The follow-up prompt that carries failing checks to the agent; `None`
/// when none failed.
pub fn fix_prompt(sha: &str, checks: &[Check]) -> Option<String> {
    let failed: Vec<&Check> = checks.iter().filter(|c| c.failed).collect();
    if failed.is_empty() {
        return None;
    }
    let mut prompt =
        format!("The CI checks of your pushed work failed on commit {sha}. Failing checks:\n");
    for c in &failed {
        let _ = write!(prompt, "- {} ({})", c.name, c.conclusion);
        if !c.url.is_empty() {
            let _ = write!(prompt, ": {}", c.url);
        }
        prompt.push('\n');
    }
    for c in failed.iter().filter(|c| !c.log_tail.trim().is_empty()) {
        // A fence longer than any run of backticks in the (untrusted) log.
        let longest = c
            .log_tail
            .split(|ch| ch != '`')
            .map(str::len)
            .max()
            .unwrap_or(0);
        let fence = "`".repeat(longest.max(2) + 1);
        let _ = write!(
            prompt,
            "\nThe end of the output of {} (as the forge reported it):\n{fence}\n{}\n{fence}\n",
            c.name,
            c.log_tail.trim_end()
        );
    }
    prompt.push_str("\nPlease find the cause and fix it in the workspace.");
    Some(prompt)
}

/// A task's checks on the wire (`None`: nothing pushed, state `none`).
pub fn checks_to_proto(task_id: Uuid, row: Option<&TaskChecksRow>) -> pb::TaskChecks {
    let Some(row) = row else {
        return pb::TaskChecks {
            task_id: task_id.to_string(),
            state: CheckState::None.as_str().into(),
            ..Default::default()
        };
    };
    pb::TaskChecks {
        task_id: task_id.to_string(),
        sha: row.sha.clone(),
        state: row.state.as_str().into(),
        checks: row
            .checks
            .0
            .iter()
            .map(|c| pb::CiCheck {
                name: c.name.clone(),
                kind: c.kind.clone(),
                status: c.status.clone(),
                conclusion: c.conclusion.clone(),
                url: c.url.clone(),
                failed: c.failed,
                log_tail: c.log_tail.clone(),
            })
            .collect(),
        error: row.error.clone(),
        polling: row.next_poll_at.is_some(),
        updated_at: Some(kandev_proto::time::from_chrono(row.updated_at)),
        fix_sent_at: row.fix_sent_at.map(kandev_proto::time::from_chrono),
    }
}

impl Engine {
    /// Watches the checks of `sha`, just pushed from the task's branch to
    /// `repository_url`, when a forge whose checks are read hosts it.
    pub(super) async fn watch_checks(&self, task_id: Uuid, repository_url: &str, sha: &str) {
        let on_forge = forge_for(&self.settings.forges, repository_url).is_some();
        if !on_forge || sha.is_empty() {
            return;
        }
        let first = Utc::now()
            + chrono::Duration::from_std(self.settings.checks_delay(0)).unwrap_or_default();
        match self
            .store
            .watch_checks(task_id, repository_url, sha, first)
            .await
        {
            Ok(()) => {
                tracing::info!(%task_id, sha, "watching the pushed commit's checks");
                self.record_metadata(
                    task_id,
                    &json!({"checks": {"state": "pending", "sha": sha}}),
                )
                .await;
            }
            Err(err) => tracing::warn!(%task_id, %err, "cannot watch the pushed commit's checks"),
        }
    }

    /// Reads the checks of watched commits whose time has come.
    pub async fn poll_checks(&self) -> Result<usize> {
        let due = self.store.checks_due(Utc::now(), POLL_BATCH).await?;
        let n = due.len();
        for row in due {
            self.poll_one(row).await?;
        }
        Ok(n)
    }

    #[tracing::instrument(skip_all, fields(task_id = %row.task_id, sha = %row.sha))]
    async fn poll_one(&self, row: TaskChecksRow) -> Result<()> {
        let forge = forge_for(&self.settings.forges, &row.repository_url);
        let read = match forge {
            Some(forge) => read_checks(&self.http, forge, &row.repository_url, &row.sha)
                .await
                .map_err(|e| e.to_string()),
            None => Err("the repository's forge is no longer configured".to_string()),
        };
        let polls = row.polls.saturating_add(1);
        let bounded = u32::try_from(polls).unwrap_or(u32::MAX) >= self.settings.checks_max_polls;
        let (state, checks, error) = match read {
            Ok(checks) => (crate::checks::summarize(&checks), checks, String::new()),
            Err(error) => {
                tracing::warn!(%error, "cannot read the commit's checks");
                (row.state, row.checks.0.clone(), error)
            }
        };
        let settled = matches!(state, CheckState::Success | CheckState::Failure)
            && checks.iter().all(|c| c.status == "completed");
        let next_poll_at = (!settled && !bounded).then(|| {
            Utc::now()
                + chrono::Duration::from_std(
                    self.settings
                        .checks_delay(u32::try_from(polls).unwrap_or(u32::MAX)),
                )
                .unwrap_or_default()
        });
        // Given up while none reported: there are none to show.
        let state = if next_poll_at.is_none() && checks.is_empty() {
            CheckState::None
        } else {
            state
        };
        let poll = ChecksPoll {
            state,
            checks: &checks,
            error: &error,
            polls,
            next_poll_at,
            at: Utc::now(),
        };
        if !self
            .store
            .record_checks(row.task_id, &row.sha, &poll)
            .await?
        {
            return Ok(());
        }
        if state != row.state {
            tracing::info!(state = state.as_str(), "the pushed commit's checks changed");
            self.record_metadata(
                row.task_id,
                &json!({"checks": {"state": state.as_str(), "sha": row.sha}}),
            )
            .await;
        }
        if state == CheckState::Failure && row.fix_sent_at.is_none() {
            self.auto_fix(row.task_id, &row.sha, &checks).await;
        }
        Ok(())
    }

    /// Sends the failure to the agent once, when the automation is on
    /// (everywhere, or for the task).
    async fn auto_fix(&self, task_id: Uuid, sha: &str, checks: &[Check]) {
        let wanted = self.settings.auto_fix_ci
            || match self.get_task(task_id).await {
                Ok(task) => serde_json::from_str::<Value>(&task.metadata_json)
                    .is_ok_and(|m| m["auto_fix_ci"] == Value::Bool(true)),
                Err(_) => false,
            };
        let Some(prompt) = fix_prompt(sha, checks).filter(|_| wanted) else {
            return;
        };
        match self.store.fix_sent(task_id, sha, Utc::now(), true).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(err) => {
                tracing::warn!(%task_id, %err, "cannot record the automatic Fix CI");
                return;
            }
        }
        match self.follow_up(task_id, prompt, ACTOR).await {
            Ok(_) => tracing::info!(%task_id, sha, "failing checks sent to the agent (automatic)"),
            Err(err) => tracing::warn!(%task_id, %err, "the automatic Fix CI could not be sent"),
        }
    }

    /// The task's watched commit and its checks; `None` when nothing was
    /// pushed to a forge (the task must exist).
    pub(super) async fn checks_of(&self, task_id: Uuid) -> Result<Option<TaskChecksRow>> {
        let row = self.store.task_checks(task_id).await?;
        if row.is_none() {
            self.get_task(task_id).await?;
        }
        Ok(row)
    }

    /// Sends the failing checks of the task's pushed commit to the agent,
    /// as `actor`'s follow-up; the names sent. Refused when none failed.
    pub(super) async fn fix_ci_now(
        &self,
        task_id: Uuid,
        actor: &str,
    ) -> Result<(ExecutionView, Vec<String>)> {
        let row = self.checks_of(task_id).await?.ok_or_else(|| {
            OrchestratorError::FailedPrecondition(
                "nothing of this task was pushed to a forge whose checks are read".into(),
            )
        })?;
        let prompt = fix_prompt(&row.sha, &row.checks.0).ok_or_else(|| {
            OrchestratorError::FailedPrecondition(format!(
                "no check failed on the pushed commit {} (its checks are {})",
                row.sha,
                row.state.as_str()
            ))
        })?;
        let execution = self.follow_up(task_id, prompt, actor).await?;
        self.store
            .fix_sent(task_id, &row.sha, Utc::now(), false)
            .await?;
        tracing::info!(%task_id, sha = %row.sha, actor, "failing checks sent to the agent");
        let names = row
            .checks
            .0
            .iter()
            .filter(|c| c.failed)
            .map(|c| c.name.clone())
            .collect();
        Ok((execution, names))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str, failed: bool, log: &str) -> Check {
        Check {
            name: name.into(),
            kind: "check_run".into(),
            status: "completed".into(),
            conclusion: if failed { "failure" } else { "success" }.into(),
            url: format!("https://ci.example/{name}"),
            failed,
            log_tail: log.into(),
        }
    }

    #[test]
    fn the_prompt_names_each_failing_check_with_its_log_tail() {
        let checks = [
            check(
                "build",
                true,
                "error[E0308]: mismatched types\n``` not a fence",
            ),
            check("lint", false, ""),
            check("test", true, ""),
        ];
        let prompt = fix_prompt("abc123", &checks).unwrap();
        assert!(prompt.contains("commit abc123"), "{prompt}");
        assert!(
            prompt.contains("- build (failure): https://ci.example/build"),
            "{prompt}"
        );
        assert!(prompt.contains("- test (failure)"), "{prompt}");
        assert!(!prompt.contains("lint"), "{prompt}");
        assert!(
            prompt.contains("````\nerror[E0308]: mismatched types\n``` not a fence\n````"),
            "{prompt}"
        );
        assert_eq!(fix_prompt("abc", &[check("lint", false, "")]), None);
    }
}
