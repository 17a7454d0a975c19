//! What the benchmark's readers look for in a line or a frame, found by
//! scanning bytes rather than parsing JSON, so a reader costs far less per
//! message than any hop it measures.

use std::time::{SystemTime, UNIX_EPOCH};

/// The key the mock agent's flood stamps each chunk with (Unix nanoseconds).
const SENT_AT: &[u8] = b"\"kandev/sentAtNanos\":";
/// The start of every feed frame (`{"seq":N,...}`).
const SEQ: &[u8] = b"{\"seq\":";

/// Unix time in nanoseconds, the clock the agent stamps with.
pub fn now_nanos() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}

fn digits_at(bytes: &[u8], at: usize) -> Option<u64> {
    let rest = bytes.get(at..)?;
    let end = rest
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(rest.len());
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

/// The send time of a flood chunk, in a raw agent line or a feed frame.
pub fn sent_at(bytes: &[u8]) -> Option<u64> {
    let at = memchr::memmem::find(bytes, SENT_AT)?;
    digits_at(bytes, at + SENT_AT.len())
}

/// The `seq` of a feed frame; `None` for other frames (acks, notices).
pub fn frame_seq(text: &[u8]) -> Option<u64> {
    if text.starts_with(SEQ) {
        digits_at(text, SEQ.len())
    } else {
        None
    }
}

/// Whether a feed frame is the end of a prompt turn.
pub fn is_turn_end(text: &[u8]) -> bool {
    memchr::memmem::find(text, b"\"kind\":\"turn_end\"").is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_stamp_and_the_seq() {
        let frame = br#"{"seq":42,"task_id":"t","event":{"raw":{"_meta":{"kandev/index":3,"kandev/sentAtNanos":1700000000123}}}}"#;
        assert_eq!(frame_seq(frame), Some(42));
        assert_eq!(sent_at(frame), Some(1_700_000_000_123));
        assert_eq!(frame_seq(br#"{"type":"ack"}"#), None);
        assert_eq!(sent_at(b"{}"), None);
        assert!(is_turn_end(br#"{"seq":1,"event":{"kind":"turn_end"}}"#));
    }
}
