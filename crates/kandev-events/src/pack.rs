//! Compression of large `acp.message` batches (a flooding agent's). Readers
//! take both forms, so batches stored before an upgrade read the same.

/// A batch larger than this is published compressed ([`pack`]); smaller
/// ones (a slow agent's) stay plain JSON, readable with `nats sub`.
pub const PACK_ABOVE: usize = 16 * 1024;
/// The first bytes of a compressed batch (JSON never starts with them):
/// then the JSON's length (u32, little endian) and an LZ4 block of it.
const PACKED_TAG: &[u8; 4] = b"KLZ4";
/// The largest JSON a compressed batch may claim: more is refused before
/// anything is allocated for it.
const MAX_UNPACKED: usize = 64 << 20;

/// What goes on the bus for `json`, an `acp.message` envelope: `json`
/// itself up to [`PACK_ABOVE`] bytes or when it does not compress, else
/// `KLZ4`, its length and an LZ4 block. Events repeat their field names,
/// ids and the chunk's text (in `data` and in `raw`), so a flood's batch
/// shrinks several times, and with it what NATS copies, stores and
/// delivers; LZ4 costs far less per byte than those copies. (The live `feed.<task_id>` messages
/// are not compressed: measured, the orchestrator's and the gateway's LZ4
/// cost as much as NATS saved on that hop.)
pub fn pack(json: Vec<u8>) -> Vec<u8> {
    Packer::default().pack(json)
}

/// [`pack`] for a publisher that packs one batch after another: LZ4 writes
/// into an initialized buffer at least as large as its worst case, which
/// is kept from one batch to the next instead of zeroed again for each;
/// each batch gets only its packed bytes.
#[derive(Debug, Default)]
pub struct Packer {
    scratch: Vec<u8>,
}

impl Packer {
    /// What goes on the bus for `json` (see [`pack`]).
    pub fn pack(&mut self, json: Vec<u8>) -> Vec<u8> {
        let Ok(len) = u32::try_from(json.len()) else {
            return json;
        };
        if json.len() <= PACK_ABOVE {
            return json;
        }
        let head = PACKED_TAG.len() + 4;
        let worst = head + lz4_flex::block::get_maximum_output_size(json.len());
        if self.scratch.len() < worst {
            self.scratch.resize(worst, 0);
        }
        self.scratch[..PACKED_TAG.len()].copy_from_slice(PACKED_TAG);
        self.scratch[PACKED_TAG.len()..head].copy_from_slice(&len.to_le_bytes());
        match lz4_flex::block::compress_into(&json, &mut self.scratch[head..]) {
            Ok(n) if head + n < json.len() => self.scratch[..head + n].to_vec(),
            _ => json,
        }
    }
}

/// Whether `payload` is a batch compressed by [`pack`].
pub fn is_packed(payload: &[u8]) -> bool {
    payload.starts_with(PACKED_TAG)
}

/// The JSON of an `acp.message` payload, compressed by [`pack`] or not.
pub fn unpack(payload: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, String> {
    use std::borrow::Cow;
    let Some(rest) = payload.strip_prefix(PACKED_TAG) else {
        return Ok(Cow::Borrowed(payload));
    };
    let (len, block) = rest
        .split_first_chunk::<4>()
        .ok_or("a compressed batch without its length")?;
    let len = u32::from_le_bytes(*len) as usize;
    if len > MAX_UNPACKED {
        return Err(format!("a compressed batch claims {len} bytes"));
    }
    let json = lz4_flex::block::decompress(block, len).map_err(|e| e.to_string())?;
    if json.len() != len {
        return Err(format!(
            "a compressed batch of {} bytes claims {len}",
            json.len()
        ));
    }
    Ok(Cow::Owned(json))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_or_incompressible_batches_stay_json() {
        let small = br#"{"data":{"events":[]}}"#.to_vec();
        assert_eq!(pack(small.clone()), small);
        assert_eq!(unpack(&small).unwrap().as_ref(), small.as_slice());
        // A JSON string of bytes that do not repeat: LZ4 cannot shrink it.
        let mut x: u64 = 1;
        let noise: String = (0..40_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(b'!' + (x % 90) as u8)
            })
            .filter(|c| *c != '"' && *c != '\\')
            .collect();
        let json = format!(r#"["{noise}"]"#).into_bytes();
        assert_eq!(pack(json.clone()), json);
    }

    #[test]
    fn one_packer_packs_batches_of_any_size_in_turn() {
        let batch = |events: usize, word: &str| -> Vec<u8> {
            let events: Vec<String> = (0..events)
                .map(|i| format!(r#"{{"seq":{i},"text":"{word} {i}"}}"#))
                .collect();
            format!(r#"{{"data":{{"events":[{}]}}}}"#, events.join(",")).into_bytes()
        };
        let mut packer = Packer::default();
        // Large, then smaller (the buffer keeps the larger batch's bytes
        // past the smaller one's end), then small enough to stay JSON.
        for json in [batch(4000, "alpha"), batch(900, "beta"), batch(3, "gamma")] {
            let packed = packer.pack(json.clone());
            assert_eq!(
                packed,
                pack(json.clone()),
                "the same as a packer of its own"
            );
            assert_eq!(is_packed(&packed), json.len() > PACK_ABOVE);
            assert_eq!(unpack(&packed).unwrap().as_ref(), json.as_slice());
        }
    }

    #[test]
    fn damaged_packed_batches_are_refused() {
        assert!(unpack(b"KLZ4").is_err(), "no length");
        let mut claims_too_much = b"KLZ4".to_vec();
        claims_too_much.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(unpack(&claims_too_much).unwrap_err().contains("claims"));
        let json = vec![b' '; 100_000];
        let mut packed = pack([b"[".as_slice(), &json, b"]"].concat());
        packed.truncate(packed.len() / 2);
        assert!(unpack(&packed).is_err(), "truncated");
        let mut wrong_length = pack([b"[".as_slice(), &json, b"]"].concat());
        wrong_length[4..8].copy_from_slice(&10u32.to_le_bytes());
        assert!(unpack(&wrong_length).is_err(), "length lies");
    }
}
