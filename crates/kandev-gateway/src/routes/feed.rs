//! A task's feed, compacted: what a client that shows the feed reads when
//! it opens a task (the newest page) and as its reader scrolls back (the
//! pages before), instead of replaying every frame. The stream from
//! `?after=<covers_to>` continues the newest page exactly.

use axum::{Json, extract::State};
use kandev_proto::v1 as pb;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::access::visible_task;
use crate::{
    auth::CurrentUser,
    clients::{Answer, orch_err},
    error::{ApiError, ApiResult, ErrorBody},
    extract::{ApiPath, ApiQuery},
    state::AppState,
};

/// Items of a page when the client does not say, and at most (the
/// orchestrator's bounds).
const DEFAULT_ITEMS: i64 = 50;
const MAX_ITEMS: i64 = 500;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FeedParams {
    /// Items that start before this seq (a page's `earliest`: the page
    /// before it); absent, the newest items.
    pub before: Option<i64>,
    /// At most this many items, 1 to 500 (default 50). A page also holds
    /// at most about 1 MiB of text, and at least one item.
    pub limit: Option<i64>,
}

/// A page of a task's compacted feed.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct FeedPage {
    /// In seq order; each covers the seqs `first_seq..=last_seq`, and
    /// together they cover `earliest..=covers_to` without a gap.
    pub items: Vec<FeedItem>,
    /// The last seq the items cover (0 when there are none). After the
    /// newest page, open the stream with `?after=<covers_to>`: its frames
    /// continue the page, each exactly once.
    pub covers_to: i64,
    /// The first seq of the first item, absent when there are none: pass
    /// it as `before` for the page before this one.
    pub earliest: Option<i64>,
    /// Whether items come before `earliest`.
    pub has_more: bool,
}

/// One item of the compacted feed.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FeedItem {
    /// Consecutive `message_chunk` frames of one message (same role,
    /// `message_id` and agent instance) as one text of at most 64 KiB; a
    /// longer message goes on in the next item.
    Message(FeedText),
    /// Consecutive `thought_chunk` frames, likewise.
    Thought(FeedText),
    /// Any other frame's event (a tool call or its update, a permission
    /// request or answer, a turn's end, a prompt, a chunk without text…),
    /// as the stream's frame `first_seq` carries it.
    Event(FeedEvent),
}

/// The chunks of a message or thought.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct FeedText {
    pub first_seq: i64,
    pub last_seq: i64,
    #[schema(format = Uuid)]
    pub instance_id: String,
    /// The first chunk's `instance_seq`; they follow one another.
    pub first_instance_seq: i64,
    /// `agent` or `user`.
    pub role: String,
    pub message_id: Option<String>,
    /// The first chunk's `timestamp`.
    pub timestamp: Option<String>,
    /// The chunks' texts, concatenated.
    pub text: String,
}

/// One event.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct FeedEvent {
    /// The frame's seq (and `last_seq`).
    pub first_seq: i64,
    pub last_seq: i64,
    #[schema(format = Uuid)]
    pub instance_id: String,
    pub first_instance_seq: i64,
    /// The frame's `event`, as the stream sends it.
    #[schema(value_type = Object)]
    pub event: Value,
}

impl FeedParams {
    /// `(before, limit)` as `ReadFeedPage` takes them (0: the newest page).
    fn parse(&self) -> ApiResult<(i64, i64)> {
        let before = match self.before {
            None => 0,
            Some(b) if b >= 1 => b,
            Some(_) => return Err(ApiError::validation("before must be 1 or more")),
        };
        let limit = self.limit.unwrap_or(DEFAULT_ITEMS);
        if !(1..=MAX_ITEMS).contains(&limit) {
            return Err(ApiError::validation(format!(
                "limit must be from 1 to {MAX_ITEMS}"
            )));
        }
        Ok((before, limit))
    }
}

impl TryFrom<pb::ReadFeedPageResponse> for FeedPage {
    type Error = ApiError;

    fn try_from(page: pb::ReadFeedPageResponse) -> ApiResult<FeedPage> {
        let items = page
            .items
            .iter()
            .map(|item| serde_json::from_str(item))
            .collect::<Result<Vec<FeedItem>, _>>()
            .map_err(|e| ApiError::internal(format!("a feed item does not parse: {e}")))?;
        Ok(FeedPage {
            items,
            covers_to: page.covers_to,
            earliest: (page.earliest > 0).then_some(page.earliest),
            has_more: page.has_more,
        })
    }
}

/// A page of the task's feed, compacted: one item per message, thought or
/// other event, the newest page first (then `?before=<earliest>` for the
/// one before). The page and the stream from `?after=<covers_to>` make the
/// feed exactly: every seq once, in order. Visible to whoever may see the
/// task.
#[utoipa::path(operation_id = "read_task_feed", get, path = "/api/v1/orchestrator/tasks/{taskId}/feed", tag = "orchestrator",
    params(("taskId" = uuid::Uuid, Path, description = "task id"), FeedParams),
    responses((status = 200, body = FeedPage),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub async fn page(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(task_id): ApiPath<String>,
    ApiQuery(params): ApiQuery<FeedParams>,
) -> ApiResult<Json<FeedPage>> {
    let task = visible_task(&state, &user, &task_id).await?;
    let (before, limit) = params.parse()?;
    let page = state
        .orchestrator()
        .read_feed_page(pb::ReadFeedPageRequest {
            task_id: task.id,
            before,
            limit,
        })
        .await
        .answer(orch_err)?;
    Ok(Json(page.try_into()?))
}
