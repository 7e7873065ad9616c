//! The one place where persisted objects are encoded and decoded.
//!
//! Every object modelcas persists (store config, manifests, refs, pack footers, index
//! values that are structured) is framed the same way:
//!
//! ```text
//! magic (8 bytes) || version (u16 LE) || flags (u16 LE) || payload || blake3(all before) (32 bytes)
//! ```
//!
//! The payload is bincode 2 (`standard()` configuration: little endian, variable-length
//! integers), zstd-compressed when flag bit 0 is set. Decoding checks the magic, refuses a
//! version newer than this build knows, checks the BLAKE3 trailer, and caps the decoded
//! size so that a hostile length cannot make us allocate without bound.
//! `docs/format/bytes.md` ("Object envelope") is the specification.

use bincode::{Decode, Encode};

/// Length of the envelope header: magic, version, flags.
pub const HEADER_LEN: usize = 12;
/// Length of the BLAKE3 trailer.
pub const TRAILER_LEN: usize = 32;
/// Flag bit 0: the payload is a zstd frame.
const FLAG_ZSTD: u16 = 1;
/// Largest decoded payload accepted (1 GiB): a manifest of a 1 TB model with 1 MiB
/// chunks is about 60 MiB, so this is far above any real object.
const MAX_PAYLOAD: usize = 1 << 30;

type Config = bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Varint,
    bincode::config::Limit<MAX_PAYLOAD>,
>;

fn config() -> Config {
    bincode::config::standard().with_limit::<MAX_PAYLOAD>()
}

/// The kinds of enveloped objects, each with its magic and current version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `config`: the store's configuration.
    Config,
    /// `repos/<org>/<name>/manifests/<commit>`: one revision.
    Manifest,
    /// `repos/<org>/<name>/refs/<ref>`: a branch or tag.
    Ref,
    /// The footer of a pack object.
    PackFooter,
    /// Values of the local index's `packs` column family.
    IndexPack,
    /// `repos/<org>/<name>/pins/<commit>`: a revision no retention policy expires.
    Pin,
    /// `locks/<kind>-<id>`: a gc lock or an ingest lease.
    Lock,
    /// `gc/condemned`: packs marked for deletion by gc, with when they were marked.
    GcState,
    /// A ref inside a transfer bundle.
    BundleRef,
    /// `moved/<2 hex>/<64 hex>`: where gc copied the live frames of a rewritten pack.
    Moved,
    /// `features`: format features a binary must know to read, or to write, the store.
    Features,
    /// `repos/<org>/<name>/used/<commit>`: when a revision was last read.
    Used,
    /// `repos/<org>/<name>/mirror/repo`: the mirror brought the repository from its
    /// upstream (it was not stored when first asked for).
    MirrorRepo,
    /// `repos/<org>/<name>/mirror/refs/<ref>`: the ref was last set by the mirror's
    /// resolution of a ref name upstream (and may be moved by it again).
    MirrorRef,
    /// `repos/<org>/<name>/partial/<commit>`: the commit is stored with only some of the
    /// upstream's files (`pull --include/--exclude`).
    Partial,
    /// `repos/<org>/<name>/checks/<commit>`: the last release check of a commit.
    Check,
    /// `repos/<org>/<name>/labels/<commit>/<key>`: one release label of a commit.
    Label,
    /// Bundle record kind 4: the labels of one revision in a transfer bundle.
    BundleLabels,
}

impl Kind {
    /// The 8-byte magic of this kind.
    pub fn magic(self) -> &'static [u8; 8] {
        match self {
            Kind::Config => b"MCASCONF",
            Kind::Manifest => b"MCASMANI",
            Kind::Ref => b"MCASREF\0",
            Kind::PackFooter => b"MCASPFTR",
            Kind::IndexPack => b"MCASIPAK",
            Kind::Pin => b"MCASPIN\0",
            Kind::Lock => b"MCASLOCK",
            Kind::GcState => b"MCASGCST",
            Kind::BundleRef => b"MCASBREF",
            Kind::Moved => b"MCASMOVE",
            Kind::Features => b"MCASFEAT",
            Kind::Used => b"MCASUSED",
            Kind::MirrorRepo => b"MCASMREP",
            Kind::MirrorRef => b"MCASMREF",
            Kind::Partial => b"MCASPART",
            Kind::Check => b"MCASCHCK",
            Kind::Label => b"MCASLABL",
            Kind::BundleLabels => b"MCASBLAB",
        }
    }

    /// The format version this build writes (and the newest it reads): 3 for manifests
    /// (version 2 adds the ingest order, version 3 the Xet file hashes, see `manifest.rs`),
    /// 1 for every other kind.
    pub fn version(self) -> u16 {
        match self {
            Kind::Manifest => 3,
            _ => 1,
        }
    }
}

/// Why an envelope could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("too short to be a modelcas object ({0} bytes)")]
    TooShort(usize),
    #[error("bad magic {found:?}, expected {expected:?}")]
    Magic { found: String, expected: String },
    #[error("format version {found} is newer than this modelcas understands ({known}); upgrade modelcas")]
    Version { found: u16, known: u16 },
    #[error("checksum mismatch: the object is corrupted")]
    Checksum,
    #[error("undecodable payload: {0}")]
    Payload(String),
}

/// Encodes `value` as an object of `kind`; `compress` zstd-compresses the payload.
pub fn encode<T: Encode>(kind: Kind, value: &T, compress: bool) -> Vec<u8> {
    let payload = bincode::encode_to_vec(value, config()).expect("encoding to a Vec cannot fail");
    let (flags, payload) = if compress {
        (
            FLAG_ZSTD,
            zstd::bulk::compress(&payload, 3).expect("zstd compression of a buffer cannot fail"),
        )
    } else {
        (0, payload)
    };
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len() + TRAILER_LEN);
    out.extend_from_slice(kind.magic());
    out.extend_from_slice(&kind.version().to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&payload);
    let sum = blake3::hash(&out);
    out.extend_from_slice(sum.as_bytes());
    out
}

/// Decodes an object of `kind`, checking magic, version and checksum. The payload is
/// decoded as the current version's layout: a kind with several versions is decoded with
/// [`decode_versioned`].
pub fn decode<T: Decode<()>>(kind: Kind, bytes: &[u8]) -> Result<T, CodecError> {
    decode_versioned(kind, bytes, |_, payload| decode_payload(payload))
}

/// Checks an object of `kind` (magic, a version from 1 to the newest known, checksum) and
/// hands its version and (decompressed) payload to `f`, which decodes the layout of that
/// version (with [`decode_payload`]).
pub fn decode_versioned<T>(
    kind: Kind,
    bytes: &[u8],
    f: impl FnOnce(u16, &[u8]) -> Result<T, CodecError>,
) -> Result<T, CodecError> {
    if bytes.len() < HEADER_LEN + TRAILER_LEN {
        return Err(CodecError::TooShort(bytes.len()));
    }
    let magic = &bytes[..8];
    if magic != kind.magic() {
        return Err(CodecError::Magic {
            found: String::from_utf8_lossy(magic).into_owned(),
            expected: String::from_utf8_lossy(kind.magic()).into_owned(),
        });
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version > kind.version() || version == 0 {
        return Err(CodecError::Version {
            found: version,
            known: kind.version(),
        });
    }
    let flags = u16::from_le_bytes([bytes[10], bytes[11]]);
    let body_end = bytes.len() - TRAILER_LEN;
    if blake3::hash(&bytes[..body_end]).as_bytes() != &bytes[body_end..] {
        return Err(CodecError::Checksum);
    }
    let payload = &bytes[HEADER_LEN..body_end];
    let decompressed;
    let payload = if flags & FLAG_ZSTD != 0 {
        decompressed = decompress_bounded(payload)?;
        &decompressed[..]
    } else {
        payload
    };
    f(version, payload)
}

/// Decodes a whole payload as `T` (trailing bytes are an error).
pub fn decode_payload<T: Decode<()>>(payload: &[u8]) -> Result<T, CodecError> {
    let (value, used) = bincode::decode_from_slice(payload, config())
        .map_err(|e| CodecError::Payload(e.to_string()))?;
    if used != payload.len() {
        return Err(CodecError::Payload(format!(
            "{} trailing bytes",
            payload.len() - used
        )));
    }
    Ok(value)
}

fn decompress_bounded(payload: &[u8]) -> Result<Vec<u8>, CodecError> {
    use std::io::Read;
    let dec = zstd::stream::read::Decoder::new(payload)
        .map_err(|e| CodecError::Payload(e.to_string()))?;
    let mut out = Vec::new();
    dec.take(MAX_PAYLOAD as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| CodecError::Payload(format!("zstd: {e}")))?;
    if out.len() > MAX_PAYLOAD {
        return Err(CodecError::Payload("payload larger than 1 GiB".into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Encode, Decode, Debug, PartialEq)]
    struct Sample {
        a: u64,
        b: String,
        c: Vec<[u8; 4]>,
    }

    #[test]
    fn round_trip_and_golden_header() {
        let v = Sample {
            a: 300,
            b: "x".into(),
            c: vec![[1, 2, 3, 4]],
        };
        for compress in [false, true] {
            let bytes = encode(Kind::Ref, &v, compress);
            assert_eq!(&bytes[..8], b"MCASREF\0");
            assert_eq!(&bytes[8..10], &[1, 0]);
            assert_eq!(decode::<Sample>(Kind::Ref, &bytes).unwrap(), v);
        }
        // payload layout: varint 300 = 0xfb 0x2c 0x01, string "x", vec of 1 array
        let bytes = encode(Kind::Ref, &v, false);
        assert_eq!(
            &bytes[12..bytes.len() - 32],
            &[0xfb, 0x2c, 0x01, 1, b'x', 1, 1, 2, 3, 4]
        );
    }

    #[test]
    fn rejects_damage() {
        let v = Sample {
            a: 1,
            b: "y".into(),
            c: vec![],
        };
        let bytes = encode(Kind::Manifest, &v, true);
        assert!(matches!(
            decode::<Sample>(Kind::Ref, &bytes),
            Err(CodecError::Magic { .. })
        ));
        let mut flipped = bytes.clone();
        flipped[14] ^= 1;
        assert!(matches!(
            decode::<Sample>(Kind::Manifest, &flipped),
            Err(CodecError::Checksum)
        ));
        let mut newer = bytes.clone();
        newer[8] = 9;
        assert!(matches!(
            decode::<Sample>(Kind::Manifest, &newer),
            Err(CodecError::Version { .. })
        ));
        assert!(matches!(
            decode::<Sample>(Kind::Manifest, &bytes[..20]),
            Err(CodecError::TooShort(_))
        ));
    }
}
