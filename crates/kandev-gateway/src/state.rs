//! The state shared by every handler.

use std::{net::SocketAddr, sync::Arc};

use crate::{
    auth::token::JwtKeys,
    clients::{AgentManager, Downstream, Orchestrator, TaskService},
    rate_limit::RateLimiter,
    stream::{boards::BoardFeeds, live::LiveFeeds},
    users::Users,
};
use axum::extract::ConnectInfo;
use http::{Extensions, HeaderMap};
use kandev_common::CancellationToken;

/// Cheap to clone: one `Arc`.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

struct Inner {
    users: Users,
    jwt: JwtKeys,
    downstream: Downstream,
    login_limiter: RateLimiter,
    api_limiter: RateLimiter,
    trust_forwarded_for: bool,
    /// The live feeds of the tasks clients watch.
    live: Arc<LiveFeeds>,
    /// The signals of the boards clients have open.
    boards: Arc<BoardFeeds>,
    /// The largest message a stream client may send.
    stream_max_message: usize,
    /// Fired when the server stops: open streams close politely.
    streams_stop: CancellationToken,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState").finish_non_exhaustive()
    }
}

/// The rate limits and how a client's address is known.
pub struct Limits {
    pub login: RateLimiter,
    pub api: RateLimiter,
    /// Use the first `X-Forwarded-For` address as the client's.
    pub trust_forwarded_for: bool,
}

impl AppState {
    pub fn new(
        users: Users,
        jwt: JwtKeys,
        downstream: Downstream,
        limits: Limits,
        live: Arc<LiveFeeds>,
        stream_max_message: usize,
    ) -> Self {
        let boards = BoardFeeds::new(live.live(), live.reconnects());
        AppState(Arc::new(Inner {
            users,
            jwt,
            downstream,
            login_limiter: limits.login,
            api_limiter: limits.api,
            trust_forwarded_for: limits.trust_forwarded_for,
            live,
            boards,
            stream_max_message,
            streams_stop: CancellationToken::new(),
        }))
    }

    /// The live feeds of the tasks clients watch.
    pub fn live(&self) -> &Arc<LiveFeeds> {
        &self.0.live
    }

    /// The signals of the boards clients have open.
    pub fn boards(&self) -> &Arc<BoardFeeds> {
        &self.0.boards
    }

    /// The largest message a stream client may send, in bytes.
    pub fn stream_max_message(&self) -> usize {
        self.0.stream_max_message
    }

    /// The users, for logging in and signing up.
    pub fn users(&self) -> &Users {
        &self.0.users
    }

    pub fn jwt(&self) -> &JwtKeys {
        &self.0.jwt
    }

    pub fn downstream(&self) -> &Downstream {
        &self.0.downstream
    }

    /// The task service's client, to call (a call takes it mutably).
    pub fn tasks(&self) -> TaskService {
        self.0.downstream.tasks.clone()
    }

    /// The configured agent manager's client, to call.
    pub fn agents(&self) -> AgentManager {
        self.0.downstream.agents.clone()
    }

    /// The orchestrator's client, to call.
    pub fn orchestrator(&self) -> Orchestrator {
        self.0.downstream.orchestrator.clone()
    }

    /// Cancelled when the server shuts down.
    pub fn streams_stop(&self) -> &CancellationToken {
        &self.0.streams_stop
    }

    pub fn login_limiter(&self) -> &RateLimiter {
        &self.0.login_limiter
    }

    pub fn api_limiter(&self) -> &RateLimiter {
        &self.0.api_limiter
    }

    /// The client's address: the peer, or the first `X-Forwarded-For` entry
    /// when the gateway is configured to trust its proxy.
    pub fn client_ip(&self, headers: &HeaderMap, extensions: &Extensions) -> String {
        if self.0.trust_forwarded_for
            && let Some(first) = headers
                .get("x-forwarded-for")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split(',').next())
                .map(str::trim)
                .filter(|v| !v.is_empty())
        {
            return first.to_string();
        }
        extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip().to_string())
            .unwrap_or_else(|| "unknown".to_string())
    }
}
