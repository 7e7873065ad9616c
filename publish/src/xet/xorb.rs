//! Xorbs as hf_xet uploads them (docs/format/xet.md, "Uploads"): chunk records, each an
//! 8-byte header (version 0, compressed length u24 LE, scheme, uncompressed length u24 LE)
//! then the payload (scheme 0 raw, 1 an LZ4 frame, 2 an LZ4 frame of the bytes grouped by
//! 4), no footer. A xorb is kept only when every record is valid and the Merkle hash of its
//! chunks' hashes is the name it was sent under.

use std::io::{self, Read, Write};

use format::XetHash;

use crate::error::PublishError;

/// Most chunks in one xorb.
pub const MAX_CHUNKS: usize = 8192;
/// Most uncompressed bytes in one xorb.
pub const MAX_BYTES: u64 = 64 << 20;
/// Most uncompressed bytes in one chunk.
pub const MAX_CHUNK: usize = 128 << 10;
/// Most bytes of one chunk's payload.
const MAX_PAYLOAD: usize = 2 * MAX_CHUNK;

/// One chunk record read back.
pub(crate) struct Record {
    pub hash: XetHash,
    pub data: Vec<u8>,
    /// The record as stored (header and payload), to write it again.
    pub raw: Vec<u8>,
}

fn bad(msg: String) -> PublishError {
    PublishError::BadObject(msg)
}

fn u24(b: &[u8]) -> usize {
    b[0] as usize | (b[1] as usize) << 8 | (b[2] as usize) << 16
}

/// The next record of `r` (`None` at the end), its chunk decoded and hashed; `i` names it
/// in errors.
pub(crate) fn next_record(r: &mut dyn Read, i: usize) -> Result<Option<Record>, PublishError> {
    let mut head = [0u8; 8];
    match read_full(r, &mut head)? {
        0 => return Ok(None),
        8 => {}
        n => {
            return Err(bad(format!(
                "record {i}: the xorb ends inside a header ({n} of 8 bytes)"
            )))
        }
    }
    let (version, clen, scheme, ulen) = (head[0], u24(&head[1..4]), head[4], u24(&head[5..8]));
    if version != 0 {
        return Err(bad(format!(
            "record {i}: version {version}, this hub reads version 0"
        )));
    }
    if ulen > MAX_CHUNK || clen > MAX_PAYLOAD {
        return Err(bad(format!(
            "record {i}: a chunk of {ulen} bytes ({clen} stored) is over the limits"
        )));
    }
    if ulen == 0 {
        return Err(bad(format!(
            "record {i}: an empty chunk (no chunker makes one)"
        )));
    }
    let mut payload = vec![0u8; clen];
    if read_full(r, &mut payload)? != clen {
        return Err(bad(format!("record {i}: the xorb ends inside a payload")));
    }
    let data = decode(scheme, &payload, ulen).map_err(|why| bad(format!("record {i}: {why}")))?;
    let mut raw = head.to_vec();
    raw.extend_from_slice(&payload);
    Ok(Some(Record {
        hash: xethash::chunk_hash(&data),
        data,
        raw,
    }))
}

/// The chunk of one payload, which must decode to exactly `len` bytes.
fn decode(scheme: u8, payload: &[u8], len: usize) -> Result<Vec<u8>, String> {
    let data = match scheme {
        0 => payload.to_vec(),
        1 | 2 => {
            let mut out = Vec::with_capacity(len);
            let mut d = lz4_flex::frame::FrameDecoder::new(payload).take(len as u64 + 1);
            d.read_to_end(&mut out)
                .map_err(|e| format!("not an LZ4 frame ({e})"))?;
            if scheme == 2 {
                out = ungroup(&out);
            }
            out
        }
        s => {
            return Err(format!(
                "compression scheme {s} is unknown (0, 1 and 2 are)"
            ))
        }
    };
    if data.len() != len {
        return Err(format!(
            "decodes to {} bytes, its header says {len}",
            data.len()
        ));
    }
    Ok(data)
}

/// Undoes byte grouping by 4: the input is the bytes at positions 0, 4, 8, ..., then
/// 1, 5, 9, ..., and so on (group k holds one more byte when k < len % 4).
fn ungroup(g: &[u8]) -> Vec<u8> {
    let n = g.len();
    let (split, rem) = (n / 4, n % 4);
    let mut out = vec![0u8; n];
    let mut at = 0;
    for k in 0..4 {
        let size = split + usize::from(k < rem);
        for (j, b) in g[at..at + size].iter().enumerate() {
            out[k + 4 * j] = *b;
        }
        at += size;
    }
    out
}

/// Reads until `buf` is full or the stream ends; the bytes read.
fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> Result<usize, PublishError> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(PublishError::Body(e.to_string())),
        }
    }
    Ok(n)
}

/// Checks the xorb `body` sent as `name` while copying it to `out`: every record valid,
/// within the limits, and the Merkle hash of the chunks `name`. Returns the number of
/// chunks.
pub(crate) fn check_into(
    name: &XetHash,
    body: &mut dyn Read,
    out: &mut dyn Write,
) -> Result<Vec<u32>, PublishError> {
    let mut tree = xethash::Tree::default();
    let (mut chunks, mut bytes) = (0usize, 0u64);
    let (mut offsets, mut at) = (Vec::new(), 0u64);
    while let Some(rec) = next_record(body, chunks)? {
        chunks += 1;
        offsets.push(at as u32);
        at += rec.raw.len() as u64;
        bytes += rec.data.len() as u64;
        if chunks > MAX_CHUNKS || bytes > MAX_BYTES {
            return Err(bad(format!(
                "a xorb holds at most {MAX_CHUNKS} chunks and {MAX_BYTES} bytes"
            )));
        }
        tree.push(rec.hash, rec.data.len() as u64);
        out.write_all(&rec.raw)
            .map_err(|e| PublishError::Io(format!("writing the upload spool: {e}")))?;
    }
    let Some(root) = tree.root().filter(|_| chunks > 0) else {
        return Err(bad("an empty xorb".into()));
    };
    if root != *name {
        return Err(bad(format!(
            "the xorb's chunks hash to {root}, not to the {name} it was sent as"
        )));
    }
    Ok(offsets)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A record of `data` stored with `scheme` (0 raw, 1 LZ4, 2 grouped then LZ4).
    pub(crate) fn record(data: &[u8], scheme: u8) -> Vec<u8> {
        let payload = match scheme {
            0 => data.to_vec(),
            _ => {
                let src = if scheme == 2 {
                    group(data)
                } else {
                    data.to_vec()
                };
                let mut enc = lz4_flex::frame::FrameEncoder::new(Vec::new());
                enc.write_all(&src).unwrap();
                enc.finish().unwrap()
            }
        };
        let mut out = vec![0u8];
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes()[..3]);
        out.push(scheme);
        out.extend_from_slice(&(data.len() as u32).to_le_bytes()[..3]);
        out.extend_from_slice(&payload);
        out
    }

    fn group(d: &[u8]) -> Vec<u8> {
        (0..4)
            .flat_map(|k| d.iter().skip(k).step_by(4).copied())
            .collect()
    }

    /// The xorb hash of chunks.
    pub(crate) fn xorb_hash(chunks: &[&[u8]]) -> XetHash {
        let mut t = xethash::Tree::default();
        for c in chunks {
            t.push(xethash::chunk_hash(c), c.len() as u64);
        }
        t.root().unwrap()
    }

    #[test]
    fn the_spec_vector_checks() {
        // docs/format/xet.md "Uploads": hf_xet 1.8.0's xorb of `b"hello xet\n" * 10`.
        let body = hex::decode(
            "0024000001640000".to_owned()
                + "04224d1860408215000000af68656c6c6f207865740a0a0041606f207865740a00000000",
        )
        .unwrap();
        let name =
            XetHash::parse("49dd99b90f8a27df4bc307d9f2b7f8dd40c048423463f71b7dcab5a3f29c03b5")
                .unwrap();
        let mut out = Vec::new();
        assert_eq!(
            check_into(&name, &mut &body[..], &mut out).unwrap(),
            vec![0]
        );
        assert_eq!(out, body);
        let rec = next_record(&mut &body[..], 0).unwrap().unwrap();
        assert_eq!(rec.data, b"hello xet\n".repeat(10));
    }

    #[test]
    fn every_scheme_decodes_and_grouping_round_trips() {
        for len in [0usize, 1, 2, 3, 5, 1000, 4097] {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 % 253) as u8).collect();
            assert_eq!(ungroup(&group(&data)), data, "{len}");
            for scheme in [0, 1, 2] {
                if len == 0 {
                    continue; // refused: lying_xorbs_are_refused
                }
                let rec = record(&data, scheme);
                assert_eq!(
                    next_record(&mut &rec[..], 0).unwrap().unwrap().data,
                    data,
                    "{len} {scheme}"
                );
            }
        }
    }

    #[test]
    fn lying_xorbs_are_refused() {
        let a: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
        let b = b"second chunk".to_vec();
        let good = [record(&a, 2), record(&b, 0)].concat();
        let name = xorb_hash(&[&a, &b]);
        assert_eq!(
            check_into(&name, &mut &good[..], &mut Vec::new()).unwrap(),
            vec![0, record(&a, 2).len() as u32]
        );
        let check = |body: &[u8]| {
            check_into(&name, &mut &body[..], &mut Vec::new())
                .unwrap_err()
                .to_string()
        };
        assert!(check(&good[..good.len() - 1]).contains("inside a payload"));
        assert!(check(&good[..good.len() - b.len() - 3]).contains("inside a header"));
        assert!(check(&[record(&b, 0), record(&a, 2)].concat()).contains("hash to"));
        assert!(check(&[]).contains("empty"));
        let mut v = good.clone();
        v[0] = 1;
        assert!(check(&v).contains("version"));
        let mut s = good.clone();
        s[4] = 7;
        assert!(check(&s).contains("scheme"));
        let mut l = good.clone();
        l[5] ^= 1; // the uncompressed length lies
        assert!(check(&l).contains("bytes"));
        let mut big = record(&b, 0);
        big[5..8].copy_from_slice(&[0, 0, 4]); // 256 KiB declared
        assert!(check(&big).contains("limits"));
        // No chunker makes an empty chunk; 8,192 of them in a 64-byte xorb would let a
        // shard name millions of chunks for nothing.
        let empty = [record(&b, 0), record(b"", 0)].concat();
        let e = check_into(&xorb_hash(&[&b, b""]), &mut &empty[..], &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("record 1: an empty chunk"), "{e}");
        let mut lz = record(&a, 1);
        let n = lz.len();
        lz[n / 2] ^= 0xff;
        assert!(check_into(&xorb_hash(&[&a]), &mut &lz[..], &mut Vec::new()).is_err());
    }
}
