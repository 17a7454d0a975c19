//! GitLab pipelines as CI checks (REST API v4): the commit's latest
//! pipeline (`GET /projects/:id/pipelines?sha=…`), each of its jobs a
//! check (`GET /projects/:id/pipelines/:pid/jobs`), and a failed job's
//! log tail (`GET /projects/:id/jobs/:job_id/trace`). A job status Kandev
//! does not know is an error (logged and counted), never guessed at.

use serde_json::Value;

use super::{Check, ChecksError, MAX_CHECKS, MAX_NAME, bounded, get_json, job_log_tail, link};
use crate::forge::{Forge, urlencoding};

/// A GitLab job's status as a check's (`status`, `conclusion`, whether it
/// failed); `None` for a status GitLab did not document when this was
/// written. A failure the pipeline allows does not fail it, and neither
/// does a manual job nobody started.
pub fn job_state(status: &str, allow_failure: bool) -> Option<(&'static str, &'static str, bool)> {
    Some(match status {
        "created" | "waiting_for_resource" | "preparing" | "pending" | "scheduled" => {
            ("queued", "", false)
        }
        "running" | "canceling" => ("in_progress", "", false),
        "success" => ("completed", "success", false),
        "failed" => ("completed", "failure", !allow_failure),
        "canceled" => ("completed", "cancelled", true),
        "skipped" => ("completed", "skipped", false),
        "manual" => ("completed", "manual", false),
        _ => return None,
    })
}

/// The jobs of the latest pipeline of `sha` in `project`, failed ones
/// with the end of their trace; none while no pipeline was created.
pub(super) async fn read(
    client: &reqwest::Client,
    forge: &Forge,
    api: &str,
    project: &str,
    sha: &str,
) -> Result<Vec<Check>, ChecksError> {
    let base = format!("{api}/projects/{}", urlencoding(project));
    let pipelines = get_json(
        client,
        forge,
        &format!("{base}/pipelines?sha={sha}&order_by=id&sort=desc&per_page=1"),
    )
    .await?;
    let Some(pipeline) = pipelines.as_array().and_then(|p| p.first()) else {
        return Ok(Vec::new());
    };
    let Some(id) = pipeline["id"].as_u64() else {
        return Err(malformed("a pipeline without an id"));
    };
    let jobs = get_json(
        client,
        forge,
        &format!("{base}/pipelines/{id}/jobs?per_page={MAX_CHECKS}"),
    )
    .await?;
    let mut checks = Vec::new();
    for job in jobs.as_array().into_iter().flatten().take(MAX_CHECKS) {
        let mut check = job_check(job)?;
        if let Some(job_id) = job["id"].as_u64().filter(|_| check.failed) {
            check.log_tail =
                job_log_tail(client, forge, &format!("{base}/jobs/{job_id}/trace")).await;
        }
        checks.push(check);
    }
    Ok(checks)
}

fn malformed(what: &str) -> ChecksError {
    ChecksError::Malformed {
        forge: "GitLab",
        message: what.into(),
    }
}

/// A job as a check (its log tail not read yet).
fn job_check(job: &Value) -> Result<Check, ChecksError> {
    let name = bounded(job["name"].as_str().unwrap_or("job"), MAX_NAME);
    let raw = job["status"].as_str().unwrap_or_default();
    let allow_failure = job["allow_failure"].as_bool().unwrap_or(false);
    let Some((status, conclusion, failed)) = job_state(raw, allow_failure) else {
        metrics::counter!(crate::metric_names::CI_UNKNOWN_STATUS, "forge" => "gitlab").increment(1);
        let error = ChecksError::UnknownStatus {
            forge: "GitLab",
            check: name,
            status: bounded(raw, MAX_NAME),
        };
        tracing::warn!(%error, "a check's status is unknown");
        return Err(error);
    };
    Ok(Check {
        name,
        kind: "job".into(),
        status: status.into(),
        conclusion: conclusion.into(),
        url: link(&job["web_url"]),
        failed,
        log_tail: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn job_statuses_map_to_check_states() {
        assert_eq!(
            job_state("failed", false),
            Some(("completed", "failure", true))
        );
        assert_eq!(
            job_state("failed", true),
            Some(("completed", "failure", false))
        );
        assert_eq!(
            job_state("running", false),
            Some(("in_progress", "", false))
        );
        assert_eq!(job_state("pending", false), Some(("queued", "", false)));
        assert_eq!(
            job_state("canceled", false),
            Some(("completed", "cancelled", true))
        );
        assert_eq!(
            job_state("skipped", false),
            Some(("completed", "skipped", false))
        );
        assert_eq!(
            job_state("success", false),
            Some(("completed", "success", false))
        );
        assert_eq!(job_state("exploded", false), None);
        let check = job_check(&json!({"id": 4, "name": "rspec", "status": "failed",
            "web_url": "https://gitlab.example/g/p/-/jobs/4"}))
        .unwrap();
        assert!(check.failed && check.kind == "job", "{check:?}");
        assert_eq!(check.url, "https://gitlab.example/g/p/-/jobs/4");
        assert!(matches!(
            job_check(&json!({"name": "x", "status": "teleported"})),
            Err(ChecksError::UnknownStatus { status, .. }) if status == "teleported"
        ));
    }
}
