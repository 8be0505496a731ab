//! HMAC-SHA256 tags for contexts that cross a trust boundary.
//!
//! The edge strips and re-stamps every context, and every hop clamps, so a
//! forged GAT gains at most the clamp's max age. A hop that receives traffic
//! from outside its trust domain (another team's cluster, a partner) can ask
//! for more: that the context was signed by a key it shares with the sender.
//! The tag is HMAC-SHA256 over every byte before `.m` (the canonical encoding
//! and `.i<key id>`), truncated to its first 128 bits (RFC 2104 §5, NIST SP
//! 800-107: ample against forgery at request rates), in unpadded base64url.
//! Key ids let a receiver hold old and new keys while senders rotate.

use std::fmt;

use hmac::{Hmac, Mac as _};
use sha2::Sha256;

/// A truncated tag: the first 128 bits of the HMAC-SHA256.
pub type Tag = [u8; TAG_LEN];

/// Bytes in a tag.
pub const TAG_LEN: usize = 16;

/// Characters in a tag's unpadded base64url form (⌈16·8/6⌉).
pub const TAG_CHARS: usize = 22;

/// Longest key id, in bytes.
pub const MAX_KEY_ID_LEN: usize = 16;

/// Shortest secret accepted: 128 bits, the tag's own strength.
pub const MIN_SECRET_LEN: usize = 16;

/// Why a [`Key`] or [`Keyring`] could not be built (configuration, not wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A key id is 1–16 bytes of `A-Z a-z 0-9 - _`.
    #[error("key id must be 1-16 characters of A-Z a-z 0-9 - _")]
    InvalidId,
    /// A secret is at least [`MIN_SECRET_LEN`] (16) bytes.
    #[error("secret must be at least 16 bytes (32 random bytes recommended)")]
    ShortSecret,
    /// Key ids in a keyring are unique.
    #[error("duplicate key id in keyring")]
    DuplicateId,
}

// === impl KeyId ===

/// A key id: 1–16 bytes of `A-Z a-z 0-9 - _`, held inline.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyId {
    len: u8,
    buf: [u8; MAX_KEY_ID_LEN],
}

impl KeyId {
    /// `s` as a key id, if it is one.
    pub fn parse(s: impl AsRef<[u8]>) -> Option<KeyId> {
        let s = s.as_ref();
        if s.is_empty() || s.len() > MAX_KEY_ID_LEN || !s.iter().all(|&b| is_base64url(b)) {
            return None;
        }
        let mut buf = [0; MAX_KEY_ID_LEN];
        buf[..s.len()].copy_from_slice(s);
        Some(KeyId { len: s.len() as u8, buf })
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len as usize]).expect("a key id is ASCII")
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl Key ===

/// A shared secret and its id. The HMAC's inner and outer pads are hashed once
/// here, so each tag costs three SHA-256 blocks.
#[derive(Clone)]
pub struct Key {
    id: KeyId,
    hmac: Hmac<Sha256>,
}

impl Key {
    /// A key named `id` with `secret` (at least 16 bytes; use 32 random bytes).
    pub fn new(id: &str, secret: &[u8]) -> Result<Key, KeyError> {
        let id = KeyId::parse(id).ok_or(KeyError::InvalidId)?;
        if secret.len() < MIN_SECRET_LEN {
            return Err(KeyError::ShortSecret);
        }
        let hmac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
        Ok(Key { id, hmac })
    }

    /// The key's id.
    pub fn id(&self) -> &KeyId {
        &self.id
    }

    /// The truncated tag of `msg`.
    pub(crate) fn tag(&self, msg: &[u8]) -> Tag {
        let mut h = self.hmac.clone();
        h.update(msg);
        let full = h.finalize().into_bytes();
        let mut tag = [0; TAG_LEN];
        tag.copy_from_slice(&full[..TAG_LEN]);
        tag
    }

    /// Whether `tag` is the truncated tag of `msg`, compared in constant time.
    pub(crate) fn verify(&self, msg: &[u8], tag: &Tag) -> bool {
        let mut h = self.hmac.clone();
        h.update(msg);
        h.verify_truncated_left(tag).is_ok()
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the secret.
        f.debug_struct("Key").field("id", &self.id).finish_non_exhaustive()
    }
}

// === impl Keyring ===

/// The keys a hop accepts tags from, by id. A handful at most (current and
/// previous during a rotation), so lookup is a linear scan.
#[derive(Clone, Debug, Default)]
pub struct Keyring {
    keys: Vec<Key>,
}

impl Keyring {
    /// A keyring of `keys`; ids must be unique.
    pub fn new(keys: impl IntoIterator<Item = Key>) -> Result<Keyring, KeyError> {
        let mut ring = Keyring::default();
        for key in keys {
            if ring.get(key.id.as_str()).is_some() {
                return Err(KeyError::DuplicateId);
            }
            ring.keys.push(key);
        }
        Ok(ring)
    }

    /// The key named `id`.
    pub fn get(&self, id: &str) -> Option<&Key> {
        self.keys.iter().find(|k| k.id.as_str() == id)
    }
}

// === base64url ===

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn is_base64url(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

fn sextet(b: u8) -> Option<u32> {
    Some(match b {
        b'A'..=b'Z' => b - b'A',
        b'a'..=b'z' => b - b'a' + 26,
        b'0'..=b'9' => b - b'0' + 52,
        b'-' => 62,
        b'_' => 63,
        _ => return None,
    } as u32)
}

/// Unpadded base64url (RFC 4648 §5) of a tag.
pub(crate) fn tag_to_base64url(tag: &Tag) -> [u8; TAG_CHARS] {
    let mut out = [0; TAG_CHARS];
    let mut o = 0;
    for chunk in tag.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..chunk.len() + 1 {
            out[o] = ALPHABET[(n >> (18 - 6 * i) & 63) as usize];
            o += 1;
        }
    }
    out
}

/// A tag from exactly 22 base64url characters, canonical only: the last
/// character carries 2 bits of the tag and 4 zero bits, so it is one of `A Q g w`.
pub(crate) fn tag_from_base64url(s: &[u8]) -> Option<Tag> {
    if s.len() != TAG_CHARS {
        return None;
    }
    let mut bits: u32 = 0;
    let mut nbits = 0;
    let mut tag = [0; TAG_LEN];
    let mut t = 0;
    for &c in s {
        bits = bits << 6 | sextet(c)?;
        nbits += 6;
        if nbits >= 8 {
            nbits -= 8;
            tag[t] = (bits >> nbits) as u8;
            t += 1;
            bits &= (1 << nbits) - 1;
        }
    }
    // 22 × 6 = 132 bits: 128 of tag, then 4 that must be zero.
    (bits == 0).then_some(tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_round_trips_and_rejects_non_canonical_endings() {
        let tag: Tag = core::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(201));
        let s = tag_to_base64url(&tag);
        assert_eq!(tag_from_base64url(&s), Some(tag));
        let mut bad = s;
        for c in ALPHABET.iter().copied() {
            bad[TAG_CHARS - 1] = c;
            let canonical = matches!(c, b'A' | b'Q' | b'g' | b'w');
            assert_eq!(tag_from_base64url(&bad).is_some(), canonical, "{}", c as char);
        }
        assert_eq!(tag_from_base64url(&s[..21]), None);
        assert_eq!(tag_from_base64url(b"AAAAAAAAAAAAAAAAAAAAA="), None);
    }

    #[test]
    fn keys_are_validated() {
        let secret = [7u8; 16];
        assert!(Key::new("k1", &secret).is_ok());
        assert!(Key::new("edge-2026_a", &secret).is_ok());
        assert_eq!(Key::new("", &secret).unwrap_err(), KeyError::InvalidId);
        assert_eq!(Key::new("a.b", &secret).unwrap_err(), KeyError::InvalidId);
        assert_eq!(Key::new("abcdefghijklmnopq", &secret).unwrap_err(), KeyError::InvalidId);
        assert_eq!(Key::new("k1", &secret[..15]).unwrap_err(), KeyError::ShortSecret);
        let k = || Key::new("k1", &secret).unwrap();
        assert_eq!(Keyring::new([k(), k()]).unwrap_err(), KeyError::DuplicateId);
        assert!(!format!("{:?}", k()).contains("7"), "Debug never prints the secret");
    }
}
