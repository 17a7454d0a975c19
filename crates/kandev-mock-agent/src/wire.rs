//! The stdout writer and JSON-RPC plumbing: message constructors, errors, and
//! the table of agent → client requests waiting for their responses.

use std::{
    collections::HashMap,
    fmt,
    io::Write,
    sync::{
        Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::log::warning;

pub(crate) const PARSE_ERROR: i64 = -32700;
pub(crate) const INVALID_REQUEST: i64 = -32600;
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
pub(crate) const INVALID_PARAMS: i64 = -32602;
pub(crate) const INTERNAL_ERROR: i64 = -32603;
pub(crate) const AUTH_REQUIRED: i64 = -32000;
pub(crate) const RESOURCE_NOT_FOUND: i64 = -32002;
pub(crate) const REQUEST_CANCELLED: i64 = -32800;

enum OutMsg {
    Line(Vec<u8>),
    Flush(oneshot::Sender<()>),
}

/// Handle to the stdout writer thread. Lines are written in the order they
/// are sent; the writer flushes whenever its queue runs empty, so a burst
/// becomes a few large writes while a lone line goes out at once.
#[derive(Clone)]
pub(crate) struct Out {
    tx: mpsc::Sender<OutMsg>,
}

impl Out {
    pub(crate) fn spawn() -> Self {
        let (tx, rx) = mpsc::channel(1024);
        std::thread::Builder::new()
            .name("stdout-writer".into())
            .spawn(move || writer_loop(rx))
            .expect("the OS lets us start one thread");
        Self { tx }
    }

    /// Writes `line` plus a newline, byte for byte (it may be invalid UTF-8 on purpose).
    pub(crate) async fn raw(&self, line: Vec<u8>) {
        // The writer only stops when stdout is gone, and then the process exits.
        let _ = self.tx.send(OutMsg::Line(line)).await;
    }

    pub(crate) async fn send(&self, msg: &Value) {
        self.raw(msg.to_string().into_bytes()).await;
    }

    /// Waits until everything sent so far is written and flushed.
    pub(crate) async fn flush(&self) {
        let (ack, done) = oneshot::channel();
        if self.tx.send(OutMsg::Flush(ack)).await.is_ok() {
            let _ = done.await;
        }
    }
}

fn writer_loop(mut rx: mpsc::Receiver<OutMsg>) {
    let stdout = std::io::stdout();
    let mut w = std::io::BufWriter::with_capacity(64 * 1024, stdout.lock());
    while let Some(msg) = rx.blocking_recv() {
        let written = match msg {
            OutMsg::Line(line) => w.write_all(&line).and_then(|()| w.write_all(b"\n")),
            OutMsg::Flush(ack) => {
                let flushed = w.flush();
                let _ = ack.send(());
                flushed
            }
        };
        let written = written.and_then(|()| if rx.is_empty() { w.flush() } else { Ok(()) });
        if let Err(e) = written {
            warning!("stdout is closed ({e}); exiting");
            std::process::exit(0);
        }
    }
    let _ = w.flush();
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    pub(crate) code: i64,
    pub(crate) message: String,
    pub(crate) data: Option<Value>,
}

impl RpcError {
    pub(crate) fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub(crate) fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub(crate) fn invalid_params(detail: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, "Invalid params").with_data(json!({ "details": detail.into() }))
    }

    fn from_json(v: &Value) -> Self {
        Self {
            code: v
                .get("code")
                .and_then(Value::as_i64)
                .unwrap_or(INTERNAL_ERROR),
            message: v
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            data: v.get("data").cloned(),
        }
    }

    pub(crate) fn to_json(&self) -> Value {
        let mut v = json!({ "code": self.code, "message": self.message });
        if let Some(data) = &self.data {
            v["data"] = data.clone();
        }
        v
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)?;
        if let Some(data) = &self.data {
            write!(f, ": {data}")?;
        }
        Ok(())
    }
}

pub(crate) fn response(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

pub(crate) fn error_response(id: &Value, err: &RpcError) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": err.to_json() })
}

pub(crate) fn notification(method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "method": method, "params": params })
}

type Pending = oneshot::Sender<Result<Value, RpcError>>;

/// Agent → client requests: numbering, and routing responses back to the caller.
pub(crate) struct Rpc {
    out: Out,
    next_id: AtomicU64,
    pending: Mutex<HashMap<u64, Pending>>,
    closed: AtomicBool,
}

impl Rpc {
    pub(crate) fn new(out: Out) -> Self {
        Self {
            out,
            next_id: AtomicU64::new(0),
            pending: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
        }
    }

    fn closed_error() -> RpcError {
        RpcError::new(INTERNAL_ERROR, "connection closed: stdin reached EOF")
    }

    /// Sends a request and waits for the client's answer.
    pub(crate) async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = self.pending.lock().expect("pending lock");
            if self.closed.load(Ordering::Acquire) {
                return Err(Self::closed_error());
            }
            pending.insert(id, tx);
        }
        self.out
            .send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await;
        rx.await.unwrap_or_else(|_| Err(Self::closed_error()))
    }

    /// Routes a response from the client; unknown ids are logged and dropped.
    pub(crate) fn on_response(&self, msg: &Value) {
        let Some(id) = msg.get("id").and_then(Value::as_u64) else {
            warning!(
                "response with an id we never used: {}",
                msg.get("id").unwrap_or(&Value::Null)
            );
            return;
        };
        let Some(tx) = self.pending.lock().expect("pending lock").remove(&id) else {
            warning!("response to unknown request id {id}");
            return;
        };
        let result = match (msg.get("result"), msg.get("error")) {
            (_, Some(err)) => Err(RpcError::from_json(err)),
            (Some(result), None) => Ok(result.clone()),
            (None, None) => Ok(Value::Null),
        };
        let _ = tx.send(result);
    }

    /// Fails every waiting request and refuses new ones (stdin is gone).
    pub(crate) fn close(&self) {
        let mut pending = self.pending.lock().expect("pending lock");
        self.closed.store(true, Ordering::Release);
        for (_, tx) in pending.drain() {
            let _ = tx.send(Err(Self::closed_error()));
        }
    }
}
