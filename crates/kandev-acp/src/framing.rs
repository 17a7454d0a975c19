//! Bounded newline-delimited framing.
//!
//! [`LineReader`] never holds more than `max_line` bytes of one line: when a
//! line grows past the limit, the bytes are discarded until the next newline
//! and the line is reported as [`Frame::TooLong`].

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The default maximum line size: 8 MiB.
pub const DEFAULT_MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// One frame read from the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A complete line without its trailing `\n` (and `\r`).
    Line(Vec<u8>),
    /// A line longer than the limit; `len` bytes were skipped.
    TooLong {
        /// How many bytes the line had (without the newline).
        len: usize,
    },
}

/// Reads lines of at most `max_line` bytes from a buffered reader.
#[derive(Debug)]
pub struct LineReader<R> {
    inner: R,
    max_line: usize,
    buf: Vec<u8>,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    /// Wraps `inner`; lines longer than `max_line` bytes are skipped.
    pub fn new(inner: R, max_line: usize) -> Self {
        Self {
            inner,
            max_line,
            buf: Vec::new(),
        }
    }

    /// Reads the next frame; `Ok(None)` at end of stream. A final line
    /// without a newline is still returned.
    pub async fn next_frame(&mut self) -> std::io::Result<Option<Frame>> {
        self.buf.clear();
        // `Some(n)` once the line is known to be too long: n bytes skipped so far.
        let mut skipped: Option<usize> = None;
        loop {
            let available = self.inner.fill_buf().await?;
            if available.is_empty() {
                // End of stream.
                return Ok(match skipped {
                    Some(len) => Some(Frame::TooLong { len }),
                    None if self.buf.is_empty() => None,
                    None => Some(self.finish_line()),
                });
            }
            let (chunk, found_newline) = match memchr::memchr(b'\n', available) {
                Some(pos) => (&available[..pos], true),
                None => (available, false),
            };
            let chunk_len = chunk.len();
            match skipped.as_mut() {
                Some(n) => *n += chunk_len,
                None if self.buf.len() + chunk_len > self.max_line => {
                    skipped = Some(self.buf.len() + chunk_len);
                    self.buf.clear();
                    self.buf.shrink_to(self.max_line.min(64 * 1024));
                }
                None => self.buf.extend_from_slice(chunk),
            }
            let consumed = chunk_len + usize::from(found_newline);
            self.inner.consume(consumed);
            if found_newline {
                return Ok(Some(match skipped {
                    Some(len) => Frame::TooLong { len },
                    None => self.finish_line(),
                }));
            }
        }
    }

    fn finish_line(&mut self) -> Frame {
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        Frame::Line(std::mem::take(&mut self.buf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn frames(input: &[u8], max: usize) -> Vec<Frame> {
        // A tiny buffer forces lines to span many fill_buf calls.
        let reader = tokio::io::BufReader::with_capacity(4, input);
        let mut lines = LineReader::new(reader, max);
        let mut out = Vec::new();
        while let Some(frame) = lines.next_frame().await.expect("read") {
            out.push(frame);
        }
        out
    }

    #[tokio::test]
    async fn splits_lines_and_strips_crlf() {
        let got = frames(b"ab\r\ncd\n\nlast", 100).await;
        assert_eq!(
            got,
            vec![
                Frame::Line(b"ab".to_vec()),
                Frame::Line(b"cd".to_vec()),
                Frame::Line(Vec::new()),
                Frame::Line(b"last".to_vec()),
            ]
        );
    }

    #[tokio::test]
    async fn skips_oversized_lines_and_keeps_going() {
        let got = frames(b"0123456789ABCDEF\nok\n0123456789", 8).await;
        assert_eq!(
            got,
            vec![
                Frame::TooLong { len: 16 },
                Frame::Line(b"ok".to_vec()),
                Frame::TooLong { len: 10 },
            ]
        );
    }

    #[tokio::test]
    async fn line_of_exactly_max_is_accepted() {
        let got = frames(b"12345678\n", 8).await;
        assert_eq!(got, vec![Frame::Line(b"12345678".to_vec())]);
    }

    #[tokio::test]
    async fn buffer_stays_bounded_while_skipping() {
        let mut big = vec![b'x'; 1 << 20];
        big.push(b'\n');
        big.extend_from_slice(b"{}\n");
        let reader = tokio::io::BufReader::with_capacity(1024, &big[..]);
        let mut lines = LineReader::new(reader, 4096);
        let first = lines.next_frame().await.expect("read");
        assert_eq!(first, Some(Frame::TooLong { len: 1 << 20 }));
        assert!(lines.buf.capacity() <= 4096 * 2);
        assert_eq!(
            lines.next_frame().await.expect("read"),
            Some(Frame::Line(b"{}".to_vec()))
        );
    }
}
