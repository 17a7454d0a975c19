//! The agent's output: stdout bytes go to the ACP client's reader, stderr
//! lines become log events, and every line that becomes an event is
//! numbered so the pipeline knows how far the output was read.
//!
//! Live output comes from the attach stream (fast: no log file in
//! between). After a restart the Docker log, which holds the same bytes,
//! is re-read from the start, skipping the lines already published.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
};

use bollard::container::LogOutput;
use bytes::Bytes;
use futures::StreamExt;
use kandev_acp::AcpClient;
use kandev_events::agent::OutputCursor;
use tokio::sync::mpsc;

use super::{Slots, lock};
use crate::docker::LogStream;

/// The longest stderr line kept; the rest of a longer line is dropped and
/// counted.
const MAX_STDERR_LINE: usize = 64 * 1024;

/// The output line an event came from: its number in its stream, from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Line {
    Stdout(u64),
    Stderr(u64),
}

impl Line {
    /// Moves `cursor` to this line.
    pub(super) fn advance(self, cursor: &mut OutputCursor) {
        match self {
            Line::Stdout(n) => cursor.stdout_lines = n,
            Line::Stderr(n) => cursor.stderr_lines = n,
        }
    }
}

/// Numbers of the lines handed to the client, in order, per stream: every
/// non-blank stdout line becomes exactly one `from_agent` event and every
/// stderr line one `log` event, so the drain pairs each event with its line
/// by popping the queue of its stream.
#[derive(Debug, Clone, Default)]
pub(super) struct LineQueue(Arc<Mutex<(VecDeque<u64>, VecDeque<u64>)>>);

impl LineQueue {
    fn push_stdout(&self, n: u64) {
        lock(&self.0).0.push_back(n);
    }

    fn push_stderr(&self, n: u64) {
        lock(&self.0).1.push_back(n);
    }

    /// The line of the next event of a stream.
    pub(super) fn pop(&self, stderr: bool) -> Option<Line> {
        let mut q = lock(&self.0);
        if stderr {
            q.1.pop_front().map(Line::Stderr)
        } else {
            q.0.pop_front().map(Line::Stdout)
        }
    }
}

/// Per-stream line accounting of one output stream.
struct Counter {
    /// Complete lines seen (skipped ones included).
    lines: u64,
    /// Lines to skip from the start: already published.
    skip: u64,
    /// Bytes of the current line, and whether they are all whitespace.
    len: usize,
    blank: bool,
}

impl Counter {
    fn new(skip: u64) -> Self {
        Counter {
            lines: 0,
            skip,
            len: 0,
            blank: true,
        }
    }

    fn skipping(&self) -> bool {
        self.lines < self.skip
    }
}

/// Copies the agent's output: stdout bytes to the ACP reader, stderr lines
/// to the client's log events, numbering each line. Lines within `skip`
/// (already published before a restart) are dropped. `max_line` is the
/// client's line limit: a longer line is an event even when blank.
pub(super) async fn demux(
    mut output: LogStream,
    stdout: mpsc::Sender<std::io::Result<Bytes>>,
    client: AcpClient,
    lines: LineQueue,
    skip: OutputCursor,
    max_line: usize,
    slots: Arc<Slots>,
) {
    let mut out = Counter::new(skip.stdout_lines);
    let mut err = Counter::new(skip.stderr_lines);
    let mut err_buf: Vec<u8> = Vec::new();
    while let Some(item) = output.next().await {
        let (is_err, frame) = match item {
            Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => (false, message),
            Ok(LogOutput::StdErr { message }) => (true, message),
            Ok(LogOutput::StdIn { .. }) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "output stream ended");
                if crate::docker::unreachable(&e) {
                    *lock(&slots.output_error) = Some(e.to_string());
                }
                break;
            }
        };
        *lock(&slots.last_output) = Some(std::time::Instant::now());
        if is_err {
            for (n, line) in stderr_lines(&mut err, &mut err_buf, &frame) {
                lines.push_stderr(n);
                client.log_line(line).await;
            }
        } else {
            let forward = stdout_part(&mut out, &frame, max_line, &lines);
            if !forward.is_empty() && stdout.send(Ok(forward)).await.is_err() {
                break;
            }
        }
    }
    if !err_buf.is_empty() && !err.skipping() {
        // A last line without its newline: no position (a sync point).
        client
            .log_line(String::from_utf8_lossy(&err_buf).into_owned())
            .await;
    }
}

/// The part of a stdout frame to forward (after the skipped lines), having
/// queued the number of every non-blank line it completes. Numbers are
/// queued before the bytes are sent, so the reader can never emit an event
/// whose line is not queued yet.
fn stdout_part(out: &mut Counter, frame: &Bytes, max_line: usize, lines: &LineQueue) -> Bytes {
    let mut start = 0;
    let mut pos = 0;
    for nl in memchr::memchr_iter(b'\n', frame) {
        let segment = &frame[pos..nl];
        pos = nl + 1;
        if out.skipping() {
            out.lines += 1;
            start = pos;
            continue;
        }
        out.len += segment.len();
        out.blank &= segment.iter().all(u8::is_ascii_whitespace);
        out.lines += 1;
        if !out.blank || out.len > max_line {
            lines.push_stdout(out.lines);
        }
        out.len = 0;
        out.blank = true;
    }
    if out.skipping() {
        // The rest is the start of a skipped line.
        return Bytes::new();
    }
    let tail = &frame[pos..];
    out.len += tail.len();
    out.blank &= tail.iter().all(u8::is_ascii_whitespace);
    frame.slice(start..)
}

/// The stderr lines a frame completes, with their numbers, as text
/// (without `\r\n`), skipping already published ones; a partial line
/// stays in `buf`.
fn stderr_lines(err: &mut Counter, buf: &mut Vec<u8>, frame: &[u8]) -> Vec<(u64, String)> {
    let mut done = Vec::new();
    let mut pos = 0;
    let append = |buf: &mut Vec<u8>, err: &Counter, part: &[u8]| {
        if !err.skipping() {
            let room = MAX_STDERR_LINE.saturating_sub(buf.len());
            buf.extend_from_slice(&part[..part.len().min(room)]);
        }
    };
    for nl in memchr::memchr_iter(b'\n', frame) {
        append(buf, err, &frame[pos..nl]);
        let len = err.len + (nl - pos);
        pos = nl + 1;
        let skipped = err.skipping();
        err.lines += 1;
        err.len = 0;
        if skipped {
            buf.clear();
            continue;
        }
        let mut text = String::from_utf8_lossy(buf).into_owned();
        buf.clear();
        if text.ends_with('\r') {
            text.pop();
        }
        if len > MAX_STDERR_LINE {
            text.push_str(&format!(" … [line of {len} bytes truncated]"));
        }
        done.push((err.lines, text));
    }
    let rest = &frame[pos..];
    err.len += rest.len();
    append(buf, err, rest);
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain_queue(q: &LineQueue, stderr: bool) -> Vec<u64> {
        std::iter::from_fn(|| q.pop(stderr))
            .map(|l| match l {
                Line::Stdout(n) | Line::Stderr(n) => n,
            })
            .collect()
    }

    #[test]
    fn stdout_lines_are_numbered_across_frames_and_blank_ones_are_not_events() {
        let q = LineQueue::default();
        let mut c = Counter::new(0);
        let a = stdout_part(
            &mut c,
            &Bytes::from_static(b"{\"a\":1}\n  \n{\"b\""),
            100,
            &q,
        );
        assert_eq!(&a[..], b"{\"a\":1}\n  \n{\"b\"");
        assert_eq!(drain_queue(&q, false), vec![1]);
        let b = stdout_part(&mut c, &Bytes::from_static(b":2}\n\n"), 100, &q);
        assert_eq!(&b[..], b":2}\n\n");
        assert_eq!(drain_queue(&q, false), vec![3]);
        assert_eq!(c.lines, 4);
    }

    #[test]
    fn skipped_stdout_lines_are_not_forwarded() {
        let q = LineQueue::default();
        let mut c = Counter::new(2);
        let a = stdout_part(&mut c, &Bytes::from_static(b"one\ntw"), 100, &q);
        assert!(a.is_empty());
        let b = stdout_part(&mut c, &Bytes::from_static(b"o\nthree\nfo"), 100, &q);
        assert_eq!(&b[..], b"three\nfo");
        assert_eq!(drain_queue(&q, false), vec![3]);
    }

    #[test]
    fn an_overlong_blank_line_still_counts_as_an_event() {
        let q = LineQueue::default();
        let mut c = Counter::new(0);
        let spaces = Bytes::from(format!("{}\n", " ".repeat(20)));
        stdout_part(&mut c, &spaces, 10, &q);
        assert_eq!(drain_queue(&q, false), vec![1]);
    }

    #[test]
    fn stderr_lines_are_split_skipped_and_bounded() {
        let mut c = Counter::new(1);
        let mut buf = Vec::new();
        let first = stderr_lines(&mut c, &mut buf, b"old\nnew 1\r\nnew");
        assert_eq!(first, vec![(2, "new 1".to_string())]);
        let second = stderr_lines(&mut c, &mut buf, b" 2\n");
        assert_eq!(second, vec![(3, "new 2".to_string())]);
        let long = format!("{}\n", "y".repeat(MAX_STDERR_LINE + 10));
        let third = stderr_lines(&mut c, &mut buf, long.as_bytes());
        assert_eq!(third[0].0, 4);
        assert!(third[0].1.ends_with(&format!(
            "[line of {} bytes truncated]",
            MAX_STDERR_LINE + 10
        )));
        assert!(third[0].1.len() < MAX_STDERR_LINE + 64);
    }
}
