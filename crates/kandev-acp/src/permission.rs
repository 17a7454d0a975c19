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

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

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

    /// Who gave the answer [`PermissionPolicy::decide`] returned for
    /// `request_id`, when the policy knows (a person's username); asked
    /// once per answer, right after `decide`, so the policy may forget it.
    fn answered_by(&self, _request_id: &Value) -> Option<String> {
        None
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

/// Allows what the agent asks, one action at a time: selects an
/// `allow_once` option whenever one is offered, wherever it is in the list.
///
/// `allow_always` is chosen only when it is the sole way to allow: agents
/// remember it beyond the answer (Claude writes a rule into the
/// repository's `.claude/settings.local.json` and stops asking, even on
/// later turns under another policy), so it is never preferred. When no
/// allow option is offered at all, the answer is `cancelled`, logged as a
/// warning: auto-approve never selects a reject option.
#[derive(Debug, Clone, Copy, Default)]
pub struct AutoApprove;

#[async_trait]
impl PermissionPolicy for AutoApprove {
    async fn decide(&self, _: &Value, request: &RequestPermissionRequest) -> PermissionDecision {
        let decision = first_of_kind(request, &[PermissionOptionKind::AllowOnce]);
        if decision != PermissionDecision::Cancel {
            return decision;
        }
        let decision = first_of_kind(request, &[PermissionOptionKind::AllowAlways]);
        let tool_call = request.tool_call.tool_call_id.0.as_ref();
        if decision == PermissionDecision::Cancel {
            tracing::warn!(
                tool_call,
                "auto-approve: no allow option offered; answered cancelled"
            );
        } else {
            tracing::info!(
                tool_call,
                "auto-approve: allow_always is the only allow option offered; selected it"
            );
        }
        decision
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
    reply: oneshot::Sender<(PermissionDecision, Option<String>)>,
}

impl PermissionAsk {
    /// Answers the question. Returns `false` when the answer came too late
    /// (timed out or the turn was cancelled).
    pub fn respond(self, decision: PermissionDecision) -> bool {
        self.reply.send((decision, None)).is_ok()
    }

    /// Answers the question as the person `by` (a username): the
    /// `permission_response` event names them (`answered_by`). Returns
    /// `false` when the answer came too late.
    pub fn respond_by(self, decision: PermissionDecision, by: &str) -> bool {
        let by = Some(by.to_owned()).filter(|b| !b.is_empty());
        self.reply.send((decision, by)).is_ok()
    }
}

/// Forwards requests to an external decider over a bounded channel and waits
/// at most `timeout` for the answer, then applies `fallback`.
#[derive(Debug, Clone)]
pub struct AskDecider {
    asks: mpsc::Sender<PermissionAsk>,
    timeout: Duration,
    fallback: PermissionDecision,
    /// Who answered each request answered by a named person, by request
    /// id (JSON text), until [`PermissionPolicy::answered_by`] takes it.
    answerers: Arc<Mutex<HashMap<String, String>>>,
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
                answerers: Arc::default(),
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
            Ok(Some((decision, by))) => {
                if let Some(by) = by {
                    crate::sync::lock(&self.answerers).insert(request_id.to_string(), by);
                }
                decision
            }
            Ok(None) | Err(_) => self.fallback.clone(),
        }
    }

    fn is_interactive(&self) -> bool {
        true
    }

    fn answered_by(&self, request_id: &Value) -> Option<String> {
        crate::sync::lock(&self.answerers).remove(&request_id.to_string())
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

    async fn auto(kinds: &[(&str, PermissionOptionKind)]) -> PermissionDecision {
        AutoApprove.decide(&Value::from(1), &request(kinds)).await
    }

    #[tokio::test]
    async fn auto_approve_prefers_allow_once_wherever_it_is_listed() {
        use PermissionOptionKind::{AllowAlways, AllowOnce, RejectOnce};
        let once = PermissionDecision::Select("once".into());
        // Claude's order: always first, once second.
        let claude = [
            ("always", AllowAlways),
            ("once", AllowOnce),
            ("no", RejectOnce),
        ];
        assert_eq!(auto(&claude).await, once);
        let once_first = [("once", AllowOnce), ("always", AllowAlways)];
        assert_eq!(auto(&once_first).await, once);
        let reject_first = [
            ("no", RejectOnce),
            ("always", AllowAlways),
            ("once", AllowOnce),
        ];
        assert_eq!(auto(&reject_first).await, once);
    }

    #[tokio::test]
    async fn auto_approve_takes_allow_always_only_when_nothing_else_allows() {
        use PermissionOptionKind::{AllowAlways, RejectAlways, RejectOnce};
        let only_always = [("no", RejectOnce), ("always", AllowAlways)];
        assert_eq!(
            auto(&only_always).await,
            PermissionDecision::Select("always".into())
        );
        // No allow option: cancelled, never a reject option.
        let none = [("no", RejectOnce), ("never", RejectAlways)];
        assert_eq!(auto(&none).await, PermissionDecision::Cancel);
        assert_eq!(auto(&[]).await, PermissionDecision::Cancel);
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

    #[tokio::test]
    async fn ask_decider_names_who_answered_once() {
        let (policy, mut asks) =
            AskDecider::new(Duration::from_secs(5), PermissionDecision::Cancel, 4);
        let req = request(&[("yes", PermissionOptionKind::AllowOnce)]);
        let answering = tokio::spawn(async move {
            let ask = asks.recv().await.expect("first ask");
            assert!(ask.respond_by(PermissionDecision::Select("yes".into()), "alice"));
            let ask = asks.recv().await.expect("second ask");
            assert!(ask.respond(PermissionDecision::Cancel));
        });
        let id = Value::from("req-1");
        assert_eq!(
            policy.decide(&id, &req).await,
            PermissionDecision::Select("yes".into())
        );
        assert_eq!(policy.answered_by(&id).as_deref(), Some("alice"));
        assert_eq!(policy.answered_by(&id), None, "taken once");
        let other = Value::from(2);
        assert_eq!(
            policy.decide(&other, &req).await,
            PermissionDecision::Cancel
        );
        assert_eq!(policy.answered_by(&other), None, "nobody named");
        answering.await.expect("decider task");
        assert_eq!(AutoApprove.answered_by(&id), None);
    }
}
