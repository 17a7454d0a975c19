//! Permission policies for `session/request_permission` and
//! `fs/write_text_file`.
//!
//! The client asks a [`PermissionPolicy`] for every permission request, each
//! in its own task, so several requests can be open at once. On
//! [`crate::AcpClient::cancel`] every open request is answered `cancelled`
//! whatever the policy is doing.
//!
//! A write the agent did not get permission for is put to the same policy
//! as a request the client makes up (a tool call `Write <path>` of kind
//! `edit`, options [`WRITE_ALLOW`] and [`WRITE_REJECT`], `_meta`
//! [`SYNTHESIZED_META`]), keyed by the write's own JSON-RPC id.

use std::time::Duration;

use agent_client_protocol::v1::schema::{
    PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    SelectedPermissionOutcome,
};
use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

/// The option that allows a write the client asks about itself.
pub const WRITE_ALLOW: &str = "allow-once";
/// The option that refuses a write the client asks about itself.
pub const WRITE_REJECT: &str = "reject-once";
/// The `_meta` key that marks a request the client made up; its value is
/// the agent's method (`fs/write_text_file`).
pub const SYNTHESIZED_META: &str = "kandev/synthesized";

/// The answer to a permission request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermissionDecision {
    /// Select the option with this id.
    Select(String),
    /// Answer `cancelled`.
    Cancel,
}

impl PermissionDecision {
    /// The v1 outcome for this decision.
    pub fn into_outcome(self) -> RequestPermissionOutcome {
        match self {
            Self::Select(id) => {
                RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id))
            }
            Self::Cancel => RequestPermissionOutcome::Cancelled,
        }
    }
}

/// Decides permission requests.
#[async_trait]
pub trait PermissionPolicy: Send + Sync + 'static {
    /// Decides one request. `request_id` is the JSON-RPC id of the request.
    async fn decide(
        &self,
        request_id: &Value,
        request: &RequestPermissionRequest,
    ) -> PermissionDecision;

    /// Whether a person (or anything outside the process) answers. When
    /// true, the client shows the questions it makes up itself (a write the
    /// agent did not ask about) as `permission_request` and
    /// `permission_response` events, so the person sees what to answer.
    fn is_interactive(&self) -> bool {
        false
    }
}

fn first_of_kind(
    request: &RequestPermissionRequest,
    kinds: &[PermissionOptionKind],
) -> PermissionDecision {
    request
        .options
        .iter()
        .find(|o| kinds.contains(&o.kind))
        .map_or(PermissionDecision::Cancel, |o| {
            PermissionDecision::Select(o.option_id.0.to_string())
        })
}

/// Selects the first `allow_once` / `allow_always` option (the seed's
/// behaviour); `cancelled` when no allow option is offered.
#[derive(Debug, Clone, Copy, Default)]
pub struct AutoApprove;

#[async_trait]
impl PermissionPolicy for AutoApprove {
    async fn decide(&self, _: &Value, request: &RequestPermissionRequest) -> PermissionDecision {
        first_of_kind(
            request,
            &[
                PermissionOptionKind::AllowOnce,
                PermissionOptionKind::AllowAlways,
            ],
        )
    }
}

/// Selects the first `reject_once` / `reject_always` option; `cancelled`
/// when no reject option is offered.
#[derive(Debug, Clone, Copy, Default)]
pub struct Deny;

#[async_trait]
impl PermissionPolicy for Deny {
    async fn decide(&self, _: &Value, request: &RequestPermissionRequest) -> PermissionDecision {
        first_of_kind(
            request,
            &[
                PermissionOptionKind::RejectOnce,
                PermissionOptionKind::RejectAlways,
            ],
        )
    }
}

/// One question to an external decider (a user in the browser, a rule
/// engine). Answer with [`PermissionAsk::respond`]; dropping it counts as no
/// answer and the policy's fallback applies once the timeout expires.
#[derive(Debug)]
pub struct PermissionAsk {
    /// The JSON-RPC id of the agent's request (pairs with the
    /// `permission_request` event's `request_id`).
    pub request_id: Value,
    /// The request as the agent sent it.
    pub request: RequestPermissionRequest,
    reply: oneshot::Sender<PermissionDecision>,
}

impl PermissionAsk {
    /// Answers the question. Returns `false` when the answer came too late
    /// (timed out or the turn was cancelled).
    pub fn respond(self, decision: PermissionDecision) -> bool {
        self.reply.send(decision).is_ok()
    }
}

/// Forwards requests to an external decider over a bounded channel and waits
/// at most `timeout` for the answer, then applies `fallback`.
#[derive(Debug, Clone)]
pub struct AskDecider {
    asks: mpsc::Sender<PermissionAsk>,
    timeout: Duration,
    fallback: PermissionDecision,
}

impl AskDecider {
    /// Creates the policy and the receiving end for the decider.
    /// `fallback` applies on timeout or when the decider is gone;
    /// [`PermissionDecision::Cancel`] is the safe choice.
    pub fn new(
        timeout: Duration,
        fallback: PermissionDecision,
        capacity: usize,
    ) -> (Self, mpsc::Receiver<PermissionAsk>) {
        let (asks, rx) = mpsc::channel(capacity.max(1));
        (
            Self {
                asks,
                timeout,
                fallback,
            },
            rx,
        )
    }
}

#[async_trait]
impl PermissionPolicy for AskDecider {
    async fn decide(
        &self,
        request_id: &Value,
        request: &RequestPermissionRequest,
    ) -> PermissionDecision {
        let (reply, answer) = oneshot::channel();
        let ask = PermissionAsk {
            request_id: request_id.clone(),
            request: request.clone(),
            reply,
        };
        let asked = async {
            self.asks.send(ask).await.ok()?;
            answer.await.ok()
        };
        match tokio::time::timeout(self.timeout, asked).await {
            Ok(Some(decision)) => decision,
            Ok(None) | Err(_) => self.fallback.clone(),
        }
    }

    fn is_interactive(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use agent_client_protocol::v1::schema::{
        PermissionOption, ToolCallUpdate, ToolCallUpdateFields,
    };

    use super::*;

    fn request(kinds: &[(&str, PermissionOptionKind)]) -> RequestPermissionRequest {
        RequestPermissionRequest::new(
            "s",
            ToolCallUpdate::new("call", ToolCallUpdateFields::new()),
            kinds
                .iter()
                .map(|(id, kind)| PermissionOption::new(id.to_string(), *id, *kind))
                .collect(),
        )
    }

    #[tokio::test]
    async fn auto_approve_picks_first_allow_option() {
        let req = request(&[
            ("no", PermissionOptionKind::RejectOnce),
            ("always", PermissionOptionKind::AllowAlways),
            ("once", PermissionOptionKind::AllowOnce),
        ]);
        let got = AutoApprove.decide(&Value::from(1), &req).await;
        assert_eq!(got, PermissionDecision::Select("always".into()));
        let only_reject = request(&[("no", PermissionOptionKind::RejectOnce)]);
        assert_eq!(
            AutoApprove.decide(&Value::from(1), &only_reject).await,
            PermissionDecision::Cancel
        );
    }

    #[tokio::test]
    async fn deny_picks_first_reject_option() {
        let req = request(&[
            ("yes", PermissionOptionKind::AllowOnce),
            ("never", PermissionOptionKind::RejectAlways),
        ]);
        assert_eq!(
            Deny.decide(&Value::from(1), &req).await,
            PermissionDecision::Select("never".into())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn ask_decider_answers_or_falls_back_on_timeout() {
        let (policy, mut asks) =
            AskDecider::new(Duration::from_secs(5), PermissionDecision::Cancel, 4);
        let req = request(&[("yes", PermissionOptionKind::AllowOnce)]);
        let answering = tokio::spawn(async move {
            let ask = asks.recv().await.expect("first ask");
            assert_eq!(ask.request_id, Value::from(7));
            assert!(ask.respond(PermissionDecision::Select("yes".into())));
            // Second ask: never answered, kept alive until the timeout.
            let ask = asks.recv().await.expect("second ask");
            tokio::time::sleep(Duration::from_secs(10)).await;
            assert!(!ask.respond(PermissionDecision::Select("yes".into())));
        });
        assert_eq!(
            policy.decide(&Value::from(7), &req).await,
            PermissionDecision::Select("yes".into())
        );
        assert_eq!(
            policy.decide(&Value::from(8), &req).await,
            PermissionDecision::Cancel
        );
        answering.await.expect("decider task");
    }
}
