//! The legacy dialect: not JSON-RPC, one `{type, timestamp, agent_id,
//! task_id, data}` object per line. The task comes from `TASK_DESCRIPTION` or
//! the first stdin line; the agent reports status, heartbeat, progress and
//! log lines, then a result, and exits.

use std::{sync::Arc, time::Duration};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

use crate::{
    ctx::Ctx,
    log::info,
    play, scenario,
    turn::{Turn, TurnEnd, legacy_line},
};

/// Reads the task from a stdin line: a JSON object's `message`, `prompt`,
/// `task` or `description` string, or the line itself.
fn task_from_line(line: &str) -> String {
    if let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(line) {
        for key in ["message", "prompt", "task", "description"] {
            if let Some(text) = obj.get(key).and_then(Value::as_str) {
                return text.to_owned();
            }
        }
    }
    line.trim().to_owned()
}

fn is_cancel(line: &str) -> bool {
    let line = line.trim();
    line.eq_ignore_ascii_case("cancel")
        || serde_json::from_str::<Value>(line)
            .is_ok_and(|v| v["type"] == "cancel" || v["method"] == "session/cancel")
}

/// Runs one task and returns the exit code: 0 completed or cancelled, 1 failed.
pub(crate) async fn run(ctx: Arc<Ctx>) -> i32 {
    let emit = |kind: &'static str, data: Value| {
        let ctx = ctx.clone();
        async move { ctx.out.send(&legacy_line(&ctx.cfg, kind, data)).await }
    };
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let task = match ctx
        .cfg
        .task_description
        .clone()
        .filter(|t| !t.trim().is_empty())
    {
        Some(task) => task,
        None => lines
            .next_line()
            .await
            .ok()
            .flatten()
            .map(|l| task_from_line(&l))
            .unwrap_or_default(),
    };
    emit("status", json!({ "status": "started" })).await;
    emit("heartbeat", json!({})).await;

    let cancel = CancellationToken::new();
    let watcher = {
        let cancel = cancel.clone();
        let shutdown = ctx.shutdown.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if is_cancel(&line) {
                    info!("cancel requested on stdin");
                    cancel.cancel();
                }
            }
            // As in the JSON-RPC dialects, EOF wakes `wait-cancel` and `hang`.
            shutdown.cancel();
        })
    };
    let heartbeat = (ctx.cfg.heartbeat_ms > 0).then(|| {
        let ctx = ctx.clone();
        let period = Duration::from_millis(ctx.cfg.heartbeat_ms);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            loop {
                ticks.tick().await;
                ctx.out
                    .send(&legacy_line(&ctx.cfg, "heartbeat", json!({})))
                    .await;
            }
        })
    });

    let end: Finished = match scenario::parse(&task, &ctx.cfg.default_scenario) {
        Err(e) => TurnEnd::Error(crate::wire::RpcError::invalid_params(e.0)).into(),
        Ok(scenario) => {
            info!("legacy task runs {scenario:?}");
            let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
            let (session_id, session) = ctx.sessions().create(&cwd);
            emit(
                "status",
                json!({ "status": "running", "session_id": session_id }),
            )
            .await;
            let turn = Turn::new(
                ctx.clone(),
                session,
                session_id,
                cwd,
                1,
                task.clone(),
                cancel,
            );
            let end = play::run(&turn, scenario).await;
            (end, turn.last_message()).into()
        }
    };
    watcher.abort();
    if let Some(heartbeat) = heartbeat {
        heartbeat.abort();
    }
    let code = match &end {
        Finished {
            end: TurnEnd::Stop(reason),
            summary,
        } if reason == "end_turn" => {
            emit(
                "result",
                json!({ "status": "completed", "summary": summary }),
            )
            .await;
            0
        }
        Finished {
            end: TurnEnd::Stop(reason),
            summary,
        } if reason == "cancelled" => {
            emit(
                "result",
                json!({ "status": "cancelled", "summary": summary }),
            )
            .await;
            0
        }
        Finished {
            end: TurnEnd::Stop(reason),
            summary,
        } => {
            emit(
                "result",
                json!({ "status": "failed", "stop_reason": reason, "summary": summary }),
            )
            .await;
            1
        }
        Finished {
            end: TurnEnd::Error(e),
            ..
        } => {
            emit("error", json!({ "message": e.message, "details": e.data })).await;
            emit("result", json!({ "status": "failed" })).await;
            1
        }
        Finished {
            end: TurnEnd::Silent,
            ..
        } => 0,
    };
    emit("status", json!({ "status": "stopped" })).await;
    ctx.out.flush().await;
    code
}

/// A turn's end plus the last thing the agent said.
struct Finished {
    end: TurnEnd,
    summary: String,
}

impl From<(TurnEnd, String)> for Finished {
    fn from((end, summary): (TurnEnd, String)) -> Self {
        Self { end, summary }
    }
}

impl From<TurnEnd> for Finished {
    fn from(end: TurnEnd) -> Self {
        Self {
            end,
            summary: String::new(),
        }
    }
}
