use super::classify::{chunk_as_written, classify_parsed};
use super::*;
use std::borrow::Cow;

fn frame(seq: i64, event: &str) -> Frame {
    Frame::new(Uuid::from_u128(1), seq, Uuid::from_u128(2), seq, event)
}

fn chunk(text: &str) -> String {
    serde_json::json!({"kind": "message_chunk", "timestamp": "t",
        "data": {"role": "agent", "text": text}, "raw": {"big": [1, 2, {"x": "y"}]}})
    .to_string()
}

#[test]
fn only_chunks_with_a_text_of_a_known_role_are_chunks() {
    let is_chunk = |event: &str| matches!(classify(event), Class::Chunk(_));
    assert!(is_chunk(&chunk("a \"quoted\" \\ é\n")));
    let quoted = chunk("a \"quoted\" é");
    let Class::Chunk(c) = classify(&quoted) else {
        panic!("a chunk");
    };
    assert_eq!(c.text, "a \"quoted\" é");
    for event in [
        r#"{"kind":"message_chunk","data":{"role":"system","text":"x"}}"#,
        r#"{"kind":"message_chunk","data":{"role":"agent","content_type":"image"}}"#,
        r#"{"kind":"message_chunk","data":"text"}"#,
        r#"{"kind":"message_chunk","data":{"role":"agent","text":1}}"#,
        r#"{"kind":"message_chunk","kind":"x","data":{"role":"agent","text":"x"}}"#,
        r#"{"kind":"tool_call","data":{"role":"agent","text":"x"}}"#,
        r#"{"n":1}"#,
        "[1]",
    ] {
        assert!(!is_chunk(event), "{event}");
    }
}

type Seen<'a> = (ItemKind, &'a str, Option<String>, Option<String>, String);

/// What a classification found, to compare the two ways.
fn seen(class: Class<'_>) -> Option<Seen<'_>> {
    match class {
        Class::Chunk(c) => Some((
            c.kind,
            c.role,
            c.message_id.map(Cow::into_owned),
            c.timestamp.map(Cow::into_owned),
            c.text.into_owned(),
        )),
        Class::Event => None,
    }
}

#[test]
fn chunks_as_the_agent_manager_writes_them_read_as_a_parse_reads_them() {
    use kandev_acp::event::{AcpEvent, ChunkData, ChunkRole, Direction, EventKind, RawJson};
    let texts = [
        "plain words",
        "a \"quoted\" line\nand a tab\t, a backslash \\ and é, 漢字, 🦀",
        "",
        "\\",
        "ends with a quote \"",
    ];
    let mut checked = 0;
    for (i, text) in texts.iter().enumerate() {
        for (message_id, session_id, raw) in [
            (Some("m-1"), Some("s \"1\""), true),
            (None, None, false),
            (Some("m\\2"), Some("s"), false),
        ] {
            for thought in [false, true] {
                let data = ChunkData {
                    role: if i % 2 == 0 {
                        ChunkRole::Agent
                    } else {
                        ChunkRole::User
                    },
                    text: Some(text.to_string()),
                    content_type: "text".into(),
                    message_id: message_id.map(str::to_string),
                };
                let raw_text = r#"{"jsonrpc":"2.0","params":{"kind":"x","data":{"a":[1]}}}"#;
                let event = AcpEvent {
                    seq: 7,
                    timestamp: chrono::Utc::now(),
                    direction: Direction::FromAgent,
                    session_id: session_id.map(str::to_string),
                    kind: if thought {
                        EventKind::ThoughtChunk(data)
                    } else {
                        EventKind::MessageChunk(data)
                    },
                    raw: serde_json::from_str(raw_text).unwrap(),
                    raw_json: raw.then(|| RawJson::parse(raw_text).unwrap()),
                };
                let mut json = Vec::new();
                event.write_json(&mut json).unwrap();
                let json = String::from_utf8(json).unwrap();
                let fast = chunk_as_written(&json).map(Class::Chunk);
                assert!(fast.is_some(), "the writer's layout: {json}");
                let parsed = seen(classify_parsed(&json));
                assert!(parsed.is_some(), "{json}");
                assert_eq!(seen(fast.unwrap()), parsed, "{json}");
                assert_eq!(seen(classify(&json)), parsed, "{json}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 30);
    // Not the writer's layout: parsed, with the same answer.
    for other in [
        r#"{"kind":"message_chunk","data":{"role":"agent","text":"x"}}"#,
        r#"{"seq":1,"timestamp":"t","direction":"d","kind":"message_chunk","data":{"role":"agent","content_type":"image"},"raw":null}"#,
        r#"{"seq":1,"timestamp":"t","direction":"d","kind":"message_chunk","data":{"role":"agent","text":"x\"#,
    ] {
        assert!(chunk_as_written(other).is_none(), "{other}");
        assert_eq!(
            seen(classify(other)),
            seen(classify_parsed(other)),
            "{other}"
        );
    }
}

#[test]
fn the_last_item_grows_in_pieces_then_becomes_one_row() {
    // A message of one chunk per append: a head row, then pieces.
    let mut last: Option<Row> = None;
    let mut rows = 1;
    for seq in 1..=40 {
        let mut c = Compactor::new(last.as_ref());
        assert!(c.push(&frame(seq, &chunk("ab"))));
        let w = c.finish();
        if seq == 1 + MAX_PIECES {
            // The 33rd piece: the rows are rewritten as one.
            assert_eq!(w.inserts, []);
            assert_eq!(w.rewrites.len(), 1);
            let r = &w.rewrites[0];
            assert_eq!((r.first_seq, r.last_seq, r.item_seq), (1, seq, 1));
            assert_eq!(
                (r.pieces, r.item_bytes, r.text.as_str()),
                (1, 2 * seq, "ab")
            );
            rows = 1;
            last = Some(r.clone());
        } else {
            assert_eq!(w.rewrites, []);
            let [r] = &w.inserts[..] else {
                panic!("one row: {w:?}");
            };
            assert_eq!((r.first_seq, r.last_seq, r.item_seq), (seq, seq, 1));
            rows = if seq == 1 { 1 } else { rows + 1 };
            assert_eq!((r.pieces, r.item_bytes), (rows, 2 * seq));
            last = Some(r.clone());
        }
    }
    // An event closes the message: its rows become one, then the event.
    let mut c = Compactor::new(last.as_ref());
    assert!(c.push(&frame(41, r#"{"kind":"turn_end"}"#)));
    let w = c.finish();
    assert_eq!(w.rewrites.len(), 1);
    let r = &w.rewrites[0];
    assert_eq!(
        (r.first_seq, r.last_seq, r.pieces, r.item_bytes),
        (1, 40, 1, 80)
    );
    assert_eq!(r.text, "", "nothing follows the stored text");
    assert_eq!(w.inserts.len(), 1);
    assert_eq!(w.inserts[0].kind, ItemKind::Event);
    assert_eq!(w.inserts[0].text, r#"{"kind":"turn_end"}"#);
}

#[test]
fn seqs_already_covered_are_skipped_and_a_gap_stops() {
    let mut c = Compactor::new(None);
    assert!(c.push(&frame(1, &chunk("a"))));
    assert!(c.push(&frame(1, &chunk("a"))));
    assert!(!c.push(&frame(3, &chunk("c"))));
    assert!(!c.push(&frame(2, &chunk("b"))), "nothing after a gap");
    assert_eq!(c.covered(), 1);
    let w = c.finish();
    assert_eq!(w.inserts.len(), 1);
    assert_eq!(w.inserts[0].text, "a");
}

#[test]
fn a_page_joins_pieces_and_keeps_to_its_bound() {
    let task = Uuid::from_u128(1);
    let mut c = Compactor::new(None);
    for seq in 1..=30 {
        let event = match seq {
            29 => chunk("head "),
            30 => chunk("piece"),
            s if s % 2 == 0 => r#"{"kind":"turn_end"}"#.to_string(),
            _ => chunk(&"x".repeat(90_000)),
        };
        assert!(c.push(&Frame::new(task, seq, task, seq, &event)));
    }
    let mut rows = c.finish().inserts;
    // The last item as a head row and a piece.
    let mut piece = rows[28].clone();
    rows[28].last_seq = 29;
    rows[28].text = "head ".into();
    (piece.first_seq, piece.first_instance_seq, piece.pieces) = (30, 30, 2);
    piece.text = "piece".into();
    rows.push(piece);
    let page = page(rows, false).unwrap();
    assert!(page.has_more, "older items did not fit");
    assert_eq!(page.covers_to, 30);
    let FeedItem::Message(t) = page.items.last().unwrap() else {
        panic!("a message");
    };
    assert_eq!(
        (t.first_seq, t.last_seq, t.text.as_str()),
        (29, 30, "head piece")
    );
    let bytes: usize = page.items.iter().map(FeedItem::bytes).sum();
    assert!(bytes <= PAGE_BYTES, "{bytes}");
    assert!(page.items.len() > 10);
    assert_eq!(page.earliest, Some(page.items[0].first_seq()));
}
