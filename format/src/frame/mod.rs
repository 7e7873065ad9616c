//! Chunk frames: how one chunk is stored inside a pack.
//!
//! ```text
//! frame  = header (16 bytes) || body
//! header = codec u8 || flags u8 || reserved u16 (0) || raw_len u32 || body_len u32 || aux u32   (all LE)
//! ```
//!
//! Codecs:
//! * `0` raw: body is the chunk.
//! * `1` zstd: body is one zstd frame of the chunk.
//! * `2` byte-grouped zstd ("bg2"): the chunk's bytes at even offsets form plane 0, those at
//!   odd offsets plane 1 (plane 0 has the extra byte of an odd-length chunk). body = plane 0
//!   section (`aux` bytes) || plane 1 section. Flag bit 0: plane 0 section is zstd; bit 1:
//!   plane 1 section is zstd; otherwise a section is the plane's raw bytes.
//!
//! Why bg2: model weights are mostly bf16/fp16. In little-endian bf16 the odd byte holds the
//! sign and the high exponent bits, which are highly repetitive; the even byte is mostly
//! mantissa noise. zstd over interleaved bytes finds little; over the separated planes it
//! compresses the exponent plane well and the mantissa plane is stored raw without wasting
//! time. The choice is made per chunk from byte-entropy estimates, so text and already
//! compressed data take the plain paths.

use crate::error::{FormatError, Result};

mod planes;

use planes::{merge_into, split_planes_into};

/// Bytes of a frame header.
pub const HEADER_LEN: usize = 16;

const CODEC_RAW: u8 = 0;
const CODEC_ZSTD: u8 = 1;
const CODEC_BG2: u8 = 2;

/// zstd level for chunks: level 1 keeps ingest fast; level 3 stored more, not less, on bf16
/// planes in our measurements (`store/examples/plane_codec.rs`, docs/BENCHMARKS.md).
const ZSTD_LEVEL: i32 = 1;
/// Match finder settings for byte planes of weights. A sign-and-exponent plane is almost
/// all Huffman-coded literals with few, short repeats, so a tiny hash table (2^6), the
/// longest minimum match (7) and a 64 KiB window find the repeats that matter: measured on
/// a bf16 shard, the plane is stored in 0.340 of its size at 1.27 GB/s of logical bytes,
/// against 0.392 at 0.35 GB/s with level 1's defaults.
const PLANE_HASH_LOG: u32 = 6;
const PLANE_MIN_MATCH: u32 = 7;
const PLANE_WINDOW_LOG: u32 = 16;
/// Estimated entropy (bits per byte) above which a plane is not worth compressing.
const INCOMPRESSIBLE_BITS: f64 = 7.6;
/// Minimum entropy difference between the planes for bg2 to be tried.
const PLANE_GAP_BITS: f64 = 1.0;
/// Bytes sampled for the entropy estimate.
const SAMPLE: usize = 64 * 1024;

thread_local! {
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> = const { std::cell::RefCell::new(None) };
    static PLANE_COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> = const { std::cell::RefCell::new(None) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { std::cell::RefCell::new(None) };
    /// Decompressed planes of the bg2 frame being decoded, reused from frame to frame.
    static PLANES: std::cell::RefCell<(Vec<u8>, Vec<u8>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
    /// The encoder's planes and compressed sections, reused from chunk to chunk: buffers
    /// allocated per chunk were new memory each time, and the page faults of filling them
    /// cost as much as the copies themselves (a profile of an ingest).
    static ENCODE_SCRATCH: std::cell::RefCell<EncodeScratch> = const { std::cell::RefCell::new(EncodeScratch::new()) };
}

/// See `ENCODE_SCRATCH`.
struct EncodeScratch {
    planes: (Vec<u8>, Vec<u8>),
    packed: (Vec<u8>, Vec<u8>),
}

impl EncodeScratch {
    const fn new() -> Self {
        EncodeScratch {
            planes: (Vec::new(), Vec::new()),
            packed: (Vec::new(), Vec::new()),
        }
    }
}

/// Compresses a byte plane into `dst` (replacing what it held); false when zstd fails or
/// the plane does not shrink.
fn zstd_compress_plane(data: &[u8], dst: &mut Vec<u8>) -> bool {
    use zstd::zstd_safe::CParameter;
    PLANE_COMPRESSOR
        .with(|c| {
            let mut c = c.borrow_mut();
            if c.is_none() {
                let mut z = zstd::bulk::Compressor::new(ZSTD_LEVEL).ok()?;
                z.set_parameter(CParameter::HashLog(PLANE_HASH_LOG)).ok()?;
                z.set_parameter(CParameter::MinMatch(PLANE_MIN_MATCH))
                    .ok()?;
                z.set_parameter(CParameter::WindowLog(PLANE_WINDOW_LOG))
                    .ok()?;
                *c = Some(z);
            }
            dst.clear();
            dst.reserve(zstd::zstd_safe::compress_bound(data.len()));
            c.as_mut()?.compress_to_buffer(data, dst).ok()
        })
        .is_some_and(|n| n < data.len())
}

fn zstd_compress(data: &[u8]) -> Option<Vec<u8>> {
    COMPRESSOR.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = zstd::bulk::Compressor::new(ZSTD_LEVEL).ok();
        }
        c.as_mut()?.compress(data).ok()
    })
}

fn zstd_decompress_into(
    src: &[u8],
    dst: &mut Vec<u8>,
    len: usize,
) -> std::result::Result<(), String> {
    DECOMPRESSOR.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_none() {
            *d = Some(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?);
        }
        let d = d.as_mut().ok_or("no zstd decompressor")?;
        dst.clear();
        dst.reserve(len);
        let n = d
            .decompress_to_buffer(src, dst)
            .map_err(|e| e.to_string())?;
        if n != len {
            return Err(format!("decompressed to {n} bytes, expected {len}"));
        }
        Ok(())
    })
}

/// Decompresses `src` into all of `dst`; a frame of another length is an error.
fn zstd_decompress_to_slice(src: &[u8], dst: &mut [u8]) -> std::result::Result<(), String> {
    DECOMPRESSOR.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_none() {
            *d = Some(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?);
        }
        let d = d.as_mut().ok_or("no zstd decompressor")?;
        let n = d
            .decompress_to_buffer(src, &mut *dst)
            .map_err(|e| e.to_string())?;
        if n != dst.len() {
            return Err(format!("decompressed to {n} bytes, expected {}", dst.len()));
        }
        Ok(())
    })
}

/// Shannon entropy (bits per byte) of the bytes `data[start], data[start+step], ...`,
/// looking at no more than [`SAMPLE`] of them.
fn entropy(data: &[u8], start: usize, step: usize) -> f64 {
    // Four histograms, summed at the end: the bytes of a weight plane repeat a few values,
    // and one histogram made every increment wait for the one before (a profile of an
    // ingest: a quarter of the encoder's own time).
    let mut hist = [[0u32; 256]; 4];
    let stride = step * (data.len() / step / SAMPLE).max(1);
    let mut n = 0usize;
    let mut samples = data.get(start..).unwrap_or(&[]).iter().step_by(stride);
    while n < SAMPLE {
        let Some(&b) = samples.next() else { break };
        hist[n % 4][b as usize] += 1;
        n += 1;
    }
    if n == 0 {
        return 0.0;
    }
    let n = n as f64;
    (0..256)
        .map(|i| hist[0][i] + hist[1][i] + hist[2][i] + hist[3][i])
        .filter(|&c| c > 0)
        .map(|c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

/// Appends the encoded frame of `data` to `out`; returns the frame's length.
pub fn encode(data: &[u8], out: &mut Vec<u8>) -> usize {
    let start = out.len();
    let (e0, e1) = (entropy(data, 0, 2), entropy(data, 1, 2));
    if data.len() >= 64 && (e0 - e1).abs() > PLANE_GAP_BITS && e0.min(e1) < INCOMPRESSIBLE_BITS {
        encode_bg2(data, e0, e1, out);
    } else if entropy(data, 0, 1) < INCOMPRESSIBLE_BITS {
        match zstd_compress(data) {
            Some(c) if c.len() < data.len() => push_frame(out, CODEC_ZSTD, 0, data.len(), &c, 0),
            _ => push_frame(out, CODEC_RAW, 0, data.len(), data, 0),
        }
    } else {
        push_frame(out, CODEC_RAW, 0, data.len(), data, 0);
    }
    out.len() - start
}

fn encode_bg2(data: &[u8], e0: f64, e1: f64, out: &mut Vec<u8>) {
    ENCODE_SCRATCH.with(|scratch| {
        let scratch = &mut *scratch.borrow_mut();
        let (p0, p1) = &mut scratch.planes;
        let (c0, c1) = &mut scratch.packed;
        split_planes_into(data, p0, p1);
        let z0 = e0 < INCOMPRESSIBLE_BITS && zstd_compress_plane(p0, c0);
        let z1 = e1 < INCOMPRESSIBLE_BITS && zstd_compress_plane(p1, c1);
        if !z0 && !z1 {
            push_frame(out, CODEC_RAW, 0, data.len(), data, 0);
            return;
        }
        let s0: &[u8] = if z0 { c0 } else { p0 };
        let s1: &[u8] = if z1 { c1 } else { p1 };
        let flags = (z0 as u8) | ((z1 as u8) << 1);
        push_header(
            out,
            CODEC_BG2,
            flags,
            data.len(),
            s0.len() + s1.len(),
            s0.len(),
        );
        out.extend_from_slice(s0);
        out.extend_from_slice(s1);
    })
}

fn push_header(
    out: &mut Vec<u8>,
    codec: u8,
    flags: u8,
    raw_len: usize,
    body_len: usize,
    aux: usize,
) {
    out.push(codec);
    out.push(flags);
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(raw_len as u32).to_le_bytes());
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
    out.extend_from_slice(&(aux as u32).to_le_bytes());
}

fn push_frame(out: &mut Vec<u8>, codec: u8, flags: u8, raw_len: usize, body: &[u8], aux: usize) {
    push_header(out, codec, flags, raw_len, body.len(), aux);
    out.extend_from_slice(body);
}

fn le32(b: &[u8]) -> usize {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
}

/// A frame's header, checked against the frame's length.
struct Parsed<'a> {
    codec: u8,
    flags: u8,
    raw_len: usize,
    aux: usize,
    body: &'a [u8],
}

/// Reads and checks a frame's header. The error is a short reason.
fn parse(frame: &[u8]) -> std::result::Result<Parsed<'_>, String> {
    if frame.len() < HEADER_LEN {
        return Err(format!(
            "frame of {} bytes is shorter than its header",
            frame.len()
        ));
    }
    let (codec, flags) = (frame[0], frame[1]);
    let raw_len = le32(&frame[4..8]);
    let body_len = le32(&frame[8..12]);
    let aux = le32(&frame[12..16]);
    let body = &frame[HEADER_LEN..];
    if raw_len > crate::MAX_CHUNK_LEN as usize {
        // Checked before anything is allocated for the chunk.
        return Err(format!(
            "frame claims a chunk of {raw_len} bytes, more than any chunk ({})",
            crate::MAX_CHUNK_LEN
        ));
    }
    if body.len() != body_len {
        return Err(format!(
            "frame body is {} bytes, header says {body_len}",
            body.len()
        ));
    }
    // Fields a codec gives no meaning are written as zeros; anything else is damage (or a
    // newer writer), refused rather than ignored, so that no flipped bit goes unnoticed.
    let reserved = u16::from_le_bytes([frame[2], frame[3]]);
    let (flags_defined, aux_defined) = if codec == CODEC_BG2 {
        (0b11, true)
    } else {
        (0, false)
    };
    if reserved != 0 || flags & !flags_defined != 0 || (!aux_defined && aux != 0) {
        return Err(format!(
            "frame header has reserved bits set (codec {codec}, flags {flags:#04x}, reserved \
             {reserved:#06x}, aux {aux}): damaged, or written by a newer modelcas"
        ));
    }
    if codec == CODEC_RAW && body_len != raw_len {
        return Err("raw frame length mismatch".into());
    }
    if codec == CODEC_BG2 && aux > body.len() {
        return Err("bg2 plane length beyond the frame".into());
    }
    if codec > CODEC_BG2 {
        return Err(format!("unknown codec {codec}"));
    }
    Ok(Parsed {
        codec,
        flags,
        raw_len,
        aux,
        body,
    })
}

/// Decodes one frame into its chunk bytes. The error is a short reason; the caller adds
/// which pack and chunk it was.
pub fn decode(frame: &[u8]) -> std::result::Result<Vec<u8>, String> {
    let p = parse(frame)?;
    match p.codec {
        CODEC_RAW => Ok(p.body.to_vec()),
        CODEC_ZSTD => {
            let mut out = Vec::new();
            zstd_decompress_into(p.body, &mut out, p.raw_len)?;
            Ok(out)
        }
        _ => PLANES.with(|planes| decode_bg2_vec(&p, &mut planes.borrow_mut())),
    }
}

/// [`decode_bg2`] into a new buffer: the planes go through this thread's reused plane
/// buffers and are merged straight into the new buffer's spare capacity, so no byte of the
/// chunk is zeroed first or copied twice (readers that keep decoded chunks, the mount and
/// serve, decode every chunk through here).
fn decode_bg2_vec(
    p: &Parsed<'_>,
    planes: &mut (Vec<u8>, Vec<u8>),
) -> std::result::Result<Vec<u8>, String> {
    let (n0, n1) = (p.raw_len.div_ceil(2), p.raw_len / 2);
    let (sec0, sec1) = bg2_planes(p, planes)?;
    debug_assert!(sec0.len() == n0 && sec1.len() == n1);
    let mut out = Vec::with_capacity(p.raw_len);
    let spare = &mut out.spare_capacity_mut()[..p.raw_len];
    for ((pair, a), b) in spare.chunks_exact_mut(2).zip(sec0.iter()).zip(sec1.iter()) {
        pair[0].write(*a);
        pair[1].write(*b);
    }
    if p.raw_len % 2 == 1 {
        spare[p.raw_len - 1].write(sec0[n0 - 1]);
    }
    // SAFETY: the loop above wrote every one of the first `raw_len` bytes of the spare
    // capacity: `n1 = raw_len / 2` pairs (plane 1 holds exactly n1 bytes, plane 0 at least
    // n1, both checked by `bg2_planes`), and the last byte when `raw_len` is odd.
    unsafe { out.set_len(p.raw_len) };
    Ok(out)
}

/// Decodes one frame straight into `out`, which must be exactly the chunk's length (a
/// frame of another length is an error): no buffer of its own, for readers that decode
/// many chunks into one window (checkout). Same checks as [`decode`].
pub fn decode_into(frame: &[u8], out: &mut [u8]) -> std::result::Result<(), String> {
    let p = parse(frame)?;
    if p.raw_len != out.len() {
        return Err(format!(
            "frame holds a chunk of {} bytes, expected {}",
            p.raw_len,
            out.len()
        ));
    }
    match p.codec {
        CODEC_RAW => {
            out.copy_from_slice(p.body);
            Ok(())
        }
        CODEC_ZSTD => zstd_decompress_to_slice(p.body, out),
        _ => PLANES.with(|planes| decode_bg2(&p, &mut planes.borrow_mut(), out)),
    }
}

/// The planes of a bg2 frame, merged into `out` (of the chunk's length). A zstd plane is
/// decompressed into `planes`; a raw plane is read where it lies.
fn decode_bg2(
    p: &Parsed<'_>,
    planes: &mut (Vec<u8>, Vec<u8>),
    out: &mut [u8],
) -> std::result::Result<(), String> {
    let (p0, p1) = bg2_planes(p, planes)?;
    merge_into(p0, p1, out);
    Ok(())
}

/// The two planes of a bg2 frame, each of its exact length (`raw_len.div_ceil(2)` and
/// `raw_len / 2`): a zstd plane decompressed into `planes`, a raw plane where it lies.
fn bg2_planes<'a>(
    p: &Parsed<'a>,
    planes: &'a mut (Vec<u8>, Vec<u8>),
) -> std::result::Result<(&'a [u8], &'a [u8]), String> {
    let (n0, n1) = (p.raw_len.div_ceil(2), p.raw_len / 2);
    let (sec0, sec1) = p.body.split_at(p.aux);
    let (z0, z1) = (p.flags & 1 != 0, p.flags & 2 != 0);
    if (!z0 && sec0.len() != n0) || (!z1 && sec1.len() != n1) {
        return Err("bg2 raw plane length mismatch".into());
    }
    let (b0, b1) = planes;
    if z0 {
        zstd_decompress_into(sec0, b0, n0)?;
    }
    if z1 {
        zstd_decompress_into(sec1, b1, n1)?;
    }
    let p0: &[u8] = if z0 { b0 } else { sec0 };
    let p1: &[u8] = if z1 { b1 } else { sec1 };
    if p0.len() != n0 || p1.len() != n1 {
        return Err(format!(
            "bg2 planes of {} and {} bytes, the chunk needs {n0} and {n1}",
            p0.len(),
            p1.len()
        ));
    }
    Ok((p0, p1))
}

/// The raw length recorded in a frame header.
pub fn raw_len(header: &[u8]) -> Result<usize> {
    if header.len() < HEADER_LEN {
        return Err(FormatError::Invalid("short frame header".into()));
    }
    Ok(le32(&header[4..8]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};

    fn bf16_like(n: usize, seed: u64) -> Vec<u8> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let x: f32 = (rng.gen::<f32>() - 0.5) * 0.04;
            let b = (x.to_bits() >> 16) as u16;
            out.extend_from_slice(&b.to_le_bytes());
        }
        out.truncate(n);
        out
    }

    fn round(data: &[u8]) -> (u8, usize) {
        let mut out = Vec::new();
        let n = encode(data, &mut out);
        assert_eq!(n, out.len());
        assert_eq!(decode(&out).unwrap(), data);
        assert_eq!(decoded_into(&out, data.len()).unwrap(), data);
        (out[0], n)
    }

    /// `decode_into` a buffer of `len` bytes that held other bytes before.
    fn decoded_into(frame: &[u8], len: usize) -> std::result::Result<Vec<u8>, String> {
        let mut buf = vec![0xa5u8; len];
        decode_into(frame, &mut buf).map(|()| buf)
    }

    #[test]
    fn decode_into_refuses_another_length_and_damage() {
        for data in [bf16_like(10_001, 5), b"abc".repeat(500), vec![9u8; 100]] {
            let mut f = Vec::new();
            encode(&data, &mut f);
            for len in [0, data.len() - 1, data.len() + 1] {
                let err = decoded_into(&f, len).unwrap_err();
                assert!(err.contains("expected"), "{err}");
            }
            assert!(decoded_into(&f[..f.len() - 1], data.len()).is_err());
            let mut bad = f.clone();
            bad[2] = 1;
            assert!(decoded_into(&bad, data.len()).is_err());
        }
    }

    #[test]
    fn picks_codecs() {
        let (codec, n) = round(&bf16_like(1 << 20, 1));
        assert_eq!(codec, CODEC_BG2);
        assert!(n < (1 << 20) * 80 / 100, "bf16 stored {n}");
        let text = b"the quick brown fox jumps over the lazy dog ".repeat(1000);
        assert_eq!(round(&text).0, CODEC_ZSTD);
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let noise: Vec<u8> = (0..100_000).map(|_| rng.gen()).collect();
        let (codec, n) = round(&noise);
        assert_eq!((codec, n), (CODEC_RAW, noise.len() + HEADER_LEN));
        // An odd length through the bg2 planes (the last byte is in plane 0 alone).
        assert_eq!(round(&bf16_like(100_001, 3)).0, CODEC_BG2);
        round(&[]);
        round(&[7]);
    }

    #[test]
    fn entropy_of_known_distributions() {
        assert_eq!(entropy(&[], 0, 1), 0.0);
        assert_eq!(entropy(&[7u8; 1000], 0, 1), 0.0);
        let two: Vec<u8> = (0..1000).map(|i| (i % 2) as u8).collect();
        assert!((entropy(&two, 0, 1) - 1.0).abs() < 1e-9);
        assert_eq!(entropy(&two, 0, 2), 0.0);
        assert_eq!(entropy(&two, 1, 2), 0.0);
        let all: Vec<u8> = (0..256 * 64).map(|i| i as u8).collect();
        assert!((entropy(&all, 0, 1) - 8.0).abs() < 1e-9);
        // More than SAMPLE bytes: a strided sample, still every value alike.
        let big: Vec<u8> = (0..SAMPLE * 3).map(|i| (i % 4) as u8).collect();
        assert!((entropy(&big, 0, 1) - 2.0).abs() < 1e-6);
    }

    #[test]
    fn rejects_damage() {
        let mut out = Vec::new();
        encode(&bf16_like(10_000, 4), &mut out);
        assert!(decode(&out[..out.len() - 1]).is_err());
        let mut bad = out.clone();
        bad[0] = 9;
        assert!(decode(&bad).is_err());
        let mut bad = out.clone();
        let last = bad.len() - 5;
        bad[last] ^= 0xff;
        // zstd may or may not notice; the chunk hash check in the reader always does.
        let _ = decode(&bad);
        // A flip in a field the codec gives no meaning is refused too.
        let mut small = Vec::new();
        encode(b"{\"hidden_size\": 64}", &mut small);
        assert!(decode(&small).is_ok());
        for (byte, bit) in [(1, 0), (2, 3), (3, 7), (12, 0), (15, 7)] {
            let mut bad = small.clone();
            bad[byte] ^= 1 << bit;
            assert!(
                decode(&bad).is_err(),
                "flip of byte {byte} bit {bit} went unnoticed"
            );
        }
        let mut bad = out.clone();
        bad[1] |= 0b100; // bg2 defines flag bits 0 and 1 only
        assert!(decode(&bad).is_err());
    }

    #[test]
    fn refuses_a_claimed_length_beyond_any_chunk_before_allocating() {
        for codec in [CODEC_RAW, CODEC_ZSTD, CODEC_BG2] {
            let mut f = Vec::new();
            push_header(&mut f, codec, 3, u32::MAX as usize, 4, 2);
            f.extend_from_slice(&[0, 0, 0, 0]);
            let err = decode(&f).unwrap_err();
            assert!(err.contains("more than any chunk"), "{err}");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_round_trip(data in proptest::collection::vec(any::<u8>(), 0..5000), seed: u64, bf in any::<bool>()) {
            let data = if bf { bf16_like(data.len(), seed) } else { data };
            let mut out = Vec::new();
            encode(&data, &mut out);
            prop_assert_eq!(decoded_into(&out, data.len()).unwrap(), data.clone());
            prop_assert_eq!(decode(&out).unwrap(), data);
        }
    }
}
