//! How a frame is read: a chunk of a message or thought, or an event.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::ItemKind;

/// What a frame is to the view.
pub(super) enum Class<'a> {
    Chunk(Chunk<'a>),
    Event,
}

pub(super) struct Chunk<'a> {
    pub(super) kind: ItemKind,
    pub(super) role: &'static str,
    pub(super) message_id: Option<Cow<'a, str>>,
    pub(super) timestamp: Option<Cow<'a, str>>,
    pub(super) text: Cow<'a, str>,
}

/// Reads what the view needs of an event: a chunk with a text of a known
/// role, or anything else (which is kept whole). Chunks as the agent
/// manager writes them (`AcpEvent::write_json`: the bulk of a feed) are
/// read by [`chunk_as_written`], a tenth of a JSON parse of the whole
/// event; anything else by [`classify_parsed`].
pub(super) fn classify(event: &str) -> Class<'_> {
    let finder = |kind: &str| memchr::memmem::find(event.as_bytes(), kind.as_bytes());
    if finder(r#""kind":"message_chunk""#).is_none()
        && finder(r#""kind":"thought_chunk""#).is_none()
    {
        return Class::Event;
    }
    match chunk_as_written(event) {
        Some(chunk) => Class::Chunk(chunk),
        None => classify_parsed(event),
    }
}

/// The chunk of an event laid out as `AcpEvent::write_json` writes one:
/// `{"seq":N,"timestamp":"…","direction":"…"[,"session_id":"…"],
/// "kind":"message_chunk","data":{"role":"…"[,"text":"…"],
/// "content_type":"…"[,"message_id":"…"]},"raw":…}`. `None` for anything
/// else, which is then parsed.
pub(super) fn chunk_as_written(event: &str) -> Option<Chunk<'_>> {
    let mut at = Cursor { text: event, at: 0 };
    at.literal(r#"{"seq":"#)?;
    at.skip_while(|b| b.is_ascii_digit());
    at.literal(r#","timestamp":"#)?;
    let timestamp = at.string()?;
    at.literal(r#","direction":"#)?;
    at.string()?;
    if at.literal(r#","session_id":"#).is_some() {
        at.string()?;
    }
    at.literal(r#","kind":"#)?;
    let kind = chunk_kind(&at.string()?)?;
    at.literal(r#","data":{"role":"#)?;
    let role = chunk_role(&at.string()?)?;
    at.literal(r#","text":"#)?;
    let text = at.string()?;
    at.literal(r#","content_type":"#)?;
    at.string()?;
    let message_id = match at.literal(r#","message_id":"#) {
        Some(()) => Some(at.string()?),
        None => None,
    };
    at.literal(r#"},"raw":"#)?;
    Some(Chunk {
        kind,
        role,
        message_id,
        timestamp: Some(timestamp),
        text,
    })
}

/// The item kind of a chunk event's `kind`.
fn chunk_kind(kind: &str) -> Option<ItemKind> {
    match kind {
        "message_chunk" => Some(ItemKind::Message),
        "thought_chunk" => Some(ItemKind::Thought),
        _ => None,
    }
}

/// A chunk's `role`, when it is one an item has.
fn chunk_role(role: &str) -> Option<&'static str> {
    match role {
        "agent" => Some("agent"),
        "user" => Some("user"),
        _ => None,
    }
}

/// Reads [`chunk_as_written`]'s layout.
struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn literal(&mut self, expected: &str) -> Option<()> {
        let rest = self.text.get(self.at..)?;
        rest.starts_with(expected)
            .then(|| self.at += expected.len())
    }

    fn skip_while(&mut self, keep: impl Fn(u8) -> bool) {
        let bytes = &self.text.as_bytes()[self.at..];
        self.at += bytes.iter().take_while(|b| keep(**b)).count();
    }

    /// A JSON string: borrowed when it has no escape, else unescaped by
    /// serde_json.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        let start = self.at;
        self.literal("\"")?;
        let bytes = self.text.as_bytes();
        let mut end = self.at;
        let mut escaped = false;
        loop {
            let i = end + memchr::memchr2(b'"', b'\\', &bytes[end..])?;
            if bytes[i] == b'"' {
                end = i;
                break;
            }
            escaped = true;
            end = i + 2;
            if end >= bytes.len() {
                return None;
            }
        }
        self.at = end + 1;
        if escaped {
            serde_json::from_str::<String>(&self.text[start..self.at])
                .ok()
                .map(Cow::Owned)
        } else {
            Some(Cow::Borrowed(&self.text[start + 1..end]))
        }
    }
}

/// [`classify`] by a JSON parse of the event.
pub(super) fn classify_parsed(event: &str) -> Class<'_> {
    #[derive(Deserialize)]
    struct Head<'a> {
        #[serde(borrow, default)]
        kind: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        timestamp: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        data: Option<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct Data<'a> {
        #[serde(borrow, default)]
        role: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        text: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        message_id: Option<Cow<'a, str>>,
    }
    let Ok(head) = serde_json::from_str::<Head>(event) else {
        return Class::Event;
    };
    let Some(kind) = head.kind.as_deref().and_then(chunk_kind) else {
        return Class::Event;
    };
    let Some(Ok(data)) = head.data.map(|d| serde_json::from_str::<Data>(d.get())) else {
        return Class::Event;
    };
    let Some(role) = data.role.as_deref().and_then(chunk_role) else {
        return Class::Event;
    };
    let Some(text) = data.text else {
        return Class::Event;
    };
    Class::Chunk(Chunk {
        kind,
        role,
        message_id: data.message_id,
        timestamp: head.timestamp,
        text,
    })
}
