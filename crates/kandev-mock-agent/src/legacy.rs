//! The legacy dialect: not JSON-RPC, one `{type, timestamp, agent_id,
//! task_id, data}` object per line. The task comes from `TASK_DESCRIPTION` or
//! the first stdin line; the agent reports status, heartbeat, progress and
//! log lines, then a result, and exits.

use std::{sync::Arc, time::Duration};

use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, BufReader, Lines, Stdin},
    task::JoinHandle,
};
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

type StdinLines = Lines<BufReader<Stdin>>;

/// Runs one task and returns the exit code: 0 completed or cancelled, 1 failed.
pub(crate) async fn run(ctx: Arc<Ctx>) -> i32 {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let task = read_task(&ctx, &mut lines).await;
    emit(&ctx, "status", json!({ "status": "started" })).await;
    emit(&ctx, "heartbeat", json!({})).await;

    let cancel = CancellationToken::new();
    let watcher = watch_stdin(lines, cancel.clone(), ctx.shutdown.clone());
    let heartbeat = heartbeats(&ctx);
    let end = play_task(&ctx, &task, cancel).await;
    watcher.abort();
    if let Some(heartbeat) = heartbeat {
        heartbeat.abort();
    }
    let code = end.report(&ctx).await;
    emit(&ctx, "status", json!({ "status": "stopped" })).await;
    ctx.out.flush().await;
    code
}

/// Writes one legacy line of `kind`.
async fn emit(ctx: &Ctx, kind: &'static str, data: Value) {
    ctx.out.send(&legacy_line(&ctx.cfg, kind, data)).await;
}

/// The task: `TASK_DESCRIPTION` when set, else the first stdin line.
async fn read_task(ctx: &Ctx, lines: &mut StdinLines) -> String {
    match ctx
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
    }
}

/// Reads the rest of stdin: a cancel line cancels the turn, and EOF shuts
/// the agent down.
fn watch_stdin(
    mut lines: StdinLines,
    cancel: CancellationToken,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
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
}

/// A heartbeat line every `heartbeat_ms` (none when it is 0).
fn heartbeats(ctx: &Arc<Ctx>) -> Option<JoinHandle<()>> {
    (ctx.cfg.heartbeat_ms > 0).then(|| {
        let ctx = ctx.clone();
        let period = Duration::from_millis(ctx.cfg.heartbeat_ms);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            loop {
                ticks.tick().await;
                emit(&ctx, "heartbeat", json!({})).await;
            }
        })
    })
}

/// Plays the task's scenario as the one turn of a new session.
async fn play_task(ctx: &Arc<Ctx>, task: &str, cancel: CancellationToken) -> Finished {
    let scenario = match scenario::parse(task, &ctx.cfg.default_scenario) {
        Err(e) => return TurnEnd::Error(crate::wire::RpcError::invalid_params(e.0)).into(),
        Ok(scenario) => scenario,
    };
    info!("legacy task runs {scenario:?}");
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let (session_id, session) = ctx.sessions().create(&cwd);
    emit(
        ctx,
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
        task.to_owned(),
        cancel,
    );
    let end = play::run(&turn, scenario).await;
    (end, turn.last_message()).into()
}

/// A turn's end plus the last thing the agent said.
struct Finished {
    end: TurnEnd,
    summary: String,
}

impl Finished {
    /// Writes the result (and an error's line) and returns the exit code.
    async fn report(&self, ctx: &Ctx) -> i32 {
        let summary = &self.summary;
        let (result, code) = match &self.end {
            TurnEnd::Stop(reason) if reason == "end_turn" => {
                (json!({ "status": "completed", "summary": summary }), 0)
            }
            TurnEnd::Stop(reason) if reason == "cancelled" => {
                (json!({ "status": "cancelled", "summary": summary }), 0)
            }
            TurnEnd::Stop(reason) => (
                json!({ "status": "failed", "stop_reason": reason, "summary": summary }),
                1,
            ),
            TurnEnd::Error(e) => {
                emit(
                    ctx,
                    "error",
                    json!({ "message": e.message, "details": e.data }),
                )
                .await;
                (json!({ "status": "failed" }), 1)
            }
            TurnEnd::Silent => return 0,
        };
        emit(ctx, "result", result).await;
        code
    }
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
