//! Webhook signatures as GitHub sends them (`X-Hub-Signature-256`):
//! HMAC-SHA256 (RFC 2104) of the body with a shared secret, in hex after
//! `sha256=`, checked in constant time; and GitLab's `X-Gitlab-Token`
//! (the shared secret itself), also compared in constant time.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// HMAC-SHA256 of `message` with `key` (RFC 2104).
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    mac(key, message).finalize().into_bytes().into()
}

fn mac(key: &[u8], message: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length.
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(message);
    mac
}

/// The 32 bytes of an `X-Hub-Signature-256` header (`sha256=<64 hex>`).
pub fn parse_signature(header: &str) -> Option<[u8; 32]> {
    let hex = header.trim().strip_prefix("sha256=")?;
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        out[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(out)
}

/// Whether `signature` is `payload`'s with `secret`, compared in constant
/// time. An empty secret verifies nothing.
pub fn signature_matches(secret: &str, payload: &[u8], signature: &[u8; 32]) -> bool {
    if secret.is_empty() {
        return false;
    }
    mac(secret.as_bytes(), payload)
        .verify_slice(signature)
        .is_ok()
}

/// The `sha256=<hex>` header GitHub sends with `payload` for `secret`
/// (what tests and fakes sign with).
pub fn sign(secret: &str, payload: &[u8]) -> String {
    let mac = hmac_sha256(secret.as_bytes(), payload);
    let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// Whether `token` is `secret` (GitLab's `X-Gitlab-Token`: the shared
/// secret itself), compared in constant time whatever the lengths: both
/// are MACed with one key and the MACs compared. An empty secret matches
/// nothing.
pub fn token_matches(secret: &str, token: &str) -> bool {
    const KEY: &[u8] = b"kandev-webhook-token";
    if secret.is_empty() {
        return false;
    }
    mac(KEY, token.as_bytes())
        .verify_slice(&hmac_sha256(KEY, secret.as_bytes()))
        .is_ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_token_matches_only_its_secret() {
        assert!(super::token_matches("s3cret", "s3cret"));
        assert!(!super::token_matches("s3cret", "s3cre"));
        assert!(!super::token_matches("s3cret", ""));
        assert!(!super::token_matches("", ""));
    }

    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_and_githubs_example() {
        // RFC 4231, test case 2.
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // GitHub's documented example of X-Hub-Signature-256.
        assert_eq!(
            sign("It's a Secret to Everybody", b"Hello, World!"),
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        );
        // A key longer than a block is hashed first (RFC 4231, case 6).
        let mac = hmac_sha256(
            &[0xaa; 131],
            b"Test Using Larger Than Block-Size Key - Hash Key First",
        );
        assert_eq!(mac[..4], [0x60, 0xe4, 0x31, 0x59]);
    }

    #[test]
    fn a_signature_is_checked_whole() {
        let good = sign("s3cret", b"{}");
        let parsed = parse_signature(&good).unwrap();
        assert!(signature_matches("s3cret", b"{}", &parsed));
        assert!(!signature_matches("other", b"{}", &parsed));
        assert!(!signature_matches("s3cret", b"{ }", &parsed));
        assert!(!signature_matches("", b"{}", &parsed));
        assert!(parse_signature("sha1=abcd").is_none());
        assert!(parse_signature(&good[..good.len() - 1]).is_none());
        assert!(parse_signature(&good.replace('a', "g")).is_none() || !good.contains('a'));
    }
}
