//! A board's live stream: every card at once, then each card as it
//! changes, pushed over a WebSocket (see [`crate::stream::boards`] for
//! where the changes come from).
//!
//! The client is sent a `snapshot` first, then `card` and `removed`
//! messages ([`BoardPush`]); whenever changes may have been missed (its
//! queue overflowed, the gateway's live connection came back) a new
//! `snapshot`. A card is read again for each change, through the same
//! checks as `GET /boards/{id}/cards`: only the board's own tasks, of a
//! board the caller may see, reach the client.

use std::collections::HashSet;

use axum::{
    extract::{
        State,
        ws::{
            CloseFrame, Message, WebSocket, WebSocketUpgrade, rejection::WebSocketUpgradeRejection,
        },
    },
    response::{IntoResponse, Response},
};
use futures::{SinkExt as _, StreamExt as _, stream::SplitSink};
use http::HeaderMap;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use uuid::Uuid;

use super::{
    access::visible_board,
    boards::{board_card, board_cards},
    orchestrator::offers_bearer_protocol,
};
use crate::{
    api::{BoardCards, BoardPush},
    auth::{CurrentUser, WS_BEARER_PROTOCOL},
    error::{ApiError, ApiResult, ErrorBody},
    extract::ApiPath,
    state::AppState,
    stream::{
        boards::BoardSub,
        session::{CLOSE_AWAY, CLOSE_INTERNAL},
    },
};

/// The live stream of a board: a `snapshot` of every card, then a `card`
/// message for each card that changes (its task or its execution) and
/// `removed` for each task deleted, as they happen; no polling. After a
/// reconnect the first message is a `snapshot` again: nothing is missed.
/// Messages the client sends are ignored. When a card cannot be read (a
/// service down) the stream closes with 1011 and the client reconnects; a
/// gateway shutting down closes with 1001.
///
/// Authenticate with `Authorization: Bearer <token>`, or from a browser
/// with the subprotocols `["kandev.bearer", "<token>"]`. Someone else's
/// board is a 404 before the upgrade.
#[utoipa::path(operation_id = "stream_board", get, path = "/api/v1/boards/{id}/stream", tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "board id")),
    responses((status = 101, description = "switching to the WebSocket protocol; then BoardPush messages", body = BoardPush),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn stream(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> ApiResult<Response> {
    let upgrade =
        upgrade.map_err(|_| ApiError::bad_request("this endpoint needs a WebSocket upgrade"))?;
    let board = visible_board(&state, &user, &id).await?;
    let board_uuid = Uuid::parse_str(&board.id)
        .map_err(|_| ApiError::internal(format!("board id {:?} is not a uuid", board.id)))?;
    // Listening first, then reading: no change falls between the two. The
    // board must be readable before the upgrade (503 over HTTP if not).
    let sub = state.boards().subscribe(board_uuid).await;
    let first = board_cards(&state, &board.id).await?;
    let upgrade = if offers_bearer_protocol(&headers) {
        upgrade.protocols([WS_BEARER_PROTOCOL])
    } else {
        upgrade
    };
    Ok(upgrade
        .on_upgrade(move |socket| async move {
            let why = run(socket, &state, &board.id, sub, first).await;
            tracing::debug!(board_id = %board.id, user = %user.username, ?why, "board stream closed");
        })
        .into_response())
}

/// Why a board stream ended.
#[derive(Debug)]
enum Ended {
    ClientLeft,
    Stopping,
    Broken(String),
}

type Sink = SplitSink<WebSocket, Message>;

/// One client: the first snapshot, then its board's changes until it
/// leaves or the gateway stops.
async fn run(
    socket: WebSocket,
    state: &AppState,
    board_id: &str,
    mut sub: BoardSub,
    first: BoardCards,
) -> Ended {
    let (mut sink, mut source) = socket.split();
    let mut out = Pusher { seq: 0 };
    if out.snapshot(&mut sink, first).await.is_err() {
        return Ended::ClientLeft;
    }
    let stop = state.streams_stop().clone();
    let mut follow_reconnects = true;
    let ended = loop {
        let resync = tokio::select! {
            () = stop.cancelled() => break Ended::Stopping,
            msg = source.next() => match msg {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => break Ended::ClientLeft,
                Some(Ok(_)) => continue,
            },
            changed = sub.reconnects.changed(), if follow_reconnects => {
                follow_reconnects = changed.is_ok();
                follow_reconnects
            }
            got = sub.rx.recv() => match got {
                Ok(task_id) => {
                    let (ids, missed) = drain(&mut sub, task_id);
                    if !missed
                        && let Err(why) = out.cards(&mut sink, state, board_id, ids).await
                    {
                        break why;
                    }
                    missed
                }
                Err(RecvError::Lagged(_)) => true,
                Err(RecvError::Closed) => break Ended::Stopping,
            },
        };
        if resync {
            let cards = match board_cards(state, board_id).await {
                Ok(cards) => cards,
                Err(err) => break Ended::Broken(err.message),
            };
            if out.snapshot(&mut sink, cards).await.is_err() {
                break Ended::ClientLeft;
            }
        }
    };
    let frame = match &ended {
        Ended::ClientLeft => None,
        Ended::Stopping => Some((CLOSE_AWAY, "the gateway is shutting down".to_string())),
        Ended::Broken(why) => Some((CLOSE_INTERNAL, format!("the board cannot be read: {why}"))),
    };
    if let Some((code, reason)) = frame {
        let reason: String = reason.chars().take(100).collect();
        let _ = sink
            .send(Message::Close(Some(CloseFrame {
                code,
                reason: reason.into(),
            })))
            .await;
    }
    ended
}

/// The task ids signalled now, each once, from `first`; `true` when some
/// were missed (then the whole board is read again).
fn drain(sub: &mut BoardSub, first: Uuid) -> (Vec<Uuid>, bool) {
    let mut ids = vec![first];
    let mut seen: HashSet<Uuid> = HashSet::from([first]);
    loop {
        match sub.rx.try_recv() {
            Ok(id) => {
                if seen.insert(id) {
                    ids.push(id);
                }
            }
            Err(TryRecvError::Lagged(_)) => return (ids, true),
            Err(_) => return (ids, false),
        }
    }
}

/// Numbers and sends one connection's messages.
struct Pusher {
    seq: u64,
}

impl Pusher {
    fn next(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    async fn send(&mut self, sink: &mut Sink, push: &BoardPush) -> Result<(), Ended> {
        let text = serde_json::to_string(push).map_err(|e| Ended::Broken(e.to_string()))?;
        sink.send(Message::Text(text.into()))
            .await
            .map_err(|_| Ended::ClientLeft)
    }

    async fn snapshot(&mut self, sink: &mut Sink, cards: BoardCards) -> Result<(), Ended> {
        let push = BoardPush::Snapshot {
            seq: self.next(),
            cards: cards.cards,
            truncated: cards.truncated,
        };
        self.send(sink, &push).await
    }

    /// Reads each card again and sends it, or that it is gone.
    async fn cards(
        &mut self,
        sink: &mut Sink,
        state: &AppState,
        board_id: &str,
        ids: Vec<Uuid>,
    ) -> Result<(), Ended> {
        for id in ids {
            let task_id = id.to_string();
            let card = board_card(state, board_id, &task_id)
                .await
                .map_err(|e| Ended::Broken(e.message))?;
            let push = match card {
                Some(card) => BoardPush::Card {
                    seq: self.next(),
                    card: Box::new(card),
                },
                None => BoardPush::Removed {
                    seq: self.next(),
                    task_id,
                },
            };
            self.send(sink, &push).await?;
        }
        Ok(())
    }
}
