//! A task's repository, checked by the agent manager before the task is
//! taken (created, or its repository or branch changed): the repository
//! policy lives there (`CheckRepository`). A refusal is a 400
//! `validation_error` whose message says why in plain words and whose
//! `details` name the field and the problem, so a run never starts only to
//! fail on it.
//!
//! When the agent manager cannot be asked (down, or of a version without
//! the check) the task is taken: its launch checks again and fails once
//! on a refusal.

use kandev_proto::v1::{self as pb, RepositoryProblem};
use serde_json::json;
use tonic::Code;

use crate::{
    clients::agent_err,
    error::{ApiError, ApiResult},
    state::AppState,
};

/// Refuses a repository (`url`, on `branch`) the task may not use; no
/// repository (an empty `url`) has nothing to check.
#[tracing::instrument(skip_all)]
pub async fn check(state: &AppState, url: &str, branch: &str) -> ApiResult<()> {
    if url.trim().is_empty() {
        return Ok(());
    }
    let answer = state
        .agents()
        .check_repository(pb::CheckRepositoryRequest {
            repository_url: url.to_string(),
            branch: branch.to_string(),
        })
        .await;
    match answer {
        Ok(answer) => verdict(answer.into_inner()),
        Err(status) if cannot_ask(status.code()) => {
            tracing::warn!(code = ?status.code(), message = status.message(),
                "the agent manager cannot check the repository; the launch will");
            Ok(())
        }
        Err(status) => Err(agent_err(status)),
    }
}

/// The agent manager is down, slow, or does not know the check.
fn cannot_ask(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable | Code::DeadlineExceeded | Code::Unimplemented
    )
}

/// The agent manager's answer as the API's: `Ok` or a 400 naming the
/// field and the problem.
fn verdict(answer: pb::CheckRepositoryResponse) -> ApiResult<()> {
    let problem = RepositoryProblem::try_from(answer.problem).map_err(|_| {
        ApiError::internal(format!(
            "the agent manager answered an unknown repository problem {}",
            answer.problem
        ))
    })?;
    let (field, name) = match problem {
        RepositoryProblem::Unspecified => return Ok(()),
        RepositoryProblem::Invalid => ("repository_url", "invalid"),
        RepositoryProblem::NotAllowed => ("repository_url", "not_allowed"),
        RepositoryProblem::NotFound => ("repository_url", "not_found"),
        RepositoryProblem::NotARepository => ("repository_url", "not_a_repository"),
        RepositoryProblem::UnknownBranch => ("branch", "unknown_branch"),
        RepositoryProblem::InvalidBranch => ("branch", "invalid"),
    };
    let mut err = ApiError::validation(answer.message);
    err.details = Some(json!({ "field": field, "problem": name }));
    Err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_its_field_and_problem() {
        assert!(verdict(pb::CheckRepositoryResponse::default()).is_ok());
        let err = verdict(pb::CheckRepositoryResponse {
            problem: RepositoryProblem::UnknownBranch as i32,
            message: "the branch x does not exist in the repository /r".into(),
        })
        .unwrap_err();
        assert_eq!(err.code, kandev_common::ErrorCode::Validation);
        assert_eq!(
            err.message,
            "the branch x does not exist in the repository /r"
        );
        assert_eq!(
            err.details,
            Some(json!({"field": "branch", "problem": "unknown_branch"}))
        );
        let unknown = verdict(pb::CheckRepositoryResponse {
            problem: 99,
            message: String::new(),
        })
        .unwrap_err();
        assert_eq!(unknown.code, kandev_common::ErrorCode::Internal);
    }

    #[test]
    fn only_a_manager_that_cannot_answer_lets_the_task_through() {
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::Unimplemented,
        ] {
            assert!(cannot_ask(code), "{code:?}");
        }
        for code in [
            Code::PermissionDenied,
            Code::Internal,
            Code::InvalidArgument,
        ] {
            assert!(!cannot_ask(code), "{code:?}");
        }
    }
}
