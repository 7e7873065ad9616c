//! Fuzz of chunk-frame decoding (`format::frame`) on mutated bytes of valid frames: bit flips
//! in the header and the body, truncations, extensions, declared lengths over the cap and
//! at it, rewritten header fields, frames spliced from two others, and random bytes.
//!
//! Whatever the bytes, `decode` and `decode_into` return an error or bytes of the length the
//! header declares, never panic, agree with each other, and allocate no block larger than
//! the declared length (and nothing beyond small error messages once the declared length
//! is over [`format::MAX_CHUNK_LEN`]), counted by this test binary's global allocator.
//! Damage a frame cannot detect by itself (a flipped byte of a raw body, of a zstd section
//! without a checksum) gives other bytes of the right length; the reader's BLAKE3 check
//! refuses those. Damage that only touches the header, cuts the frame or extends it gives
//! an error or exactly the original bytes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use format::frame::{self, HEADER_LEN};
use proptest::prelude::*;
use proptest::sample::Index;
use rand::{Rng, SeedableRng};

/// The allocator of this test binary: [`System`], counting the blocks asked for by the
/// thread inside [`counted`].
struct Counting;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    static TOTAL: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = TRACKING.try_with(|t| {
        if t.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
            let _ = TOTAL.try_with(|s| s.set(s.get().saturating_add(size)));
        }
    });
}

// SAFETY: every call is passed to `System` unchanged; `note` only touches this thread's
// const-initialised cells, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract, passed on to `System` unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract, passed on to `System` unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on to `System` unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: the caller's contract, passed on to `System` unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// `f`'s result, the largest block and the total bytes it allocated on this thread.
fn counted<T>(f: impl FnOnce() -> T) -> (T, usize, usize) {
    LARGEST.with(|l| l.set(0));
    TOTAL.with(|t| t.set(0));
    TRACKING.with(|t| t.set(true));
    let r = f();
    TRACKING.with(|t| t.set(false));
    (r, LARGEST.with(Cell::get), TOTAL.with(Cell::get))
}

/// Allocations any call may make whatever it decodes: error messages and the like.
const SLACK: usize = 4096;
const CAP: usize = format::MAX_CHUNK_LEN as usize;

/// Chunk bytes of one of the kinds the encoder treats differently: noise (raw), text
/// (zstd), bf16-like weights (bg2, one or both planes compressed), zeros, a few bytes.
fn chunk(kind: u8, len: usize, seed: u64) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    match kind % 5 {
        0 => (0..len).map(|_| rng.gen()).collect(),
        1 => b"tokenizer config vocab merges "
            .iter()
            .cycle()
            .take(len)
            .copied()
            .collect(),
        2 => (0..len.div_ceil(2))
            .flat_map(|_| {
                let x: f32 = (rng.gen::<f32>() - 0.5) * 0.04;
                ((x.to_bits() >> 16) as u16).to_le_bytes()
            })
            .take(len)
            .collect(),
        3 => vec![0; len],
        _ => (0..len % 9).map(|_| rng.gen()).collect(),
    }
}

/// The length a frame's header declares, if it has a header.
fn declared(frame: &[u8]) -> Option<usize> {
    let h = frame.get(4..8)?;
    Some(u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize)
}

/// How a valid frame is damaged.
#[derive(Clone, Debug)]
enum Mutation {
    /// Flip one bit of the 16-byte header.
    HeaderFlip(Index, u8),
    /// Flip up to four bits of the body.
    BodyFlips(Vec<(Index, u8)>),
    /// Keep only the first bytes.
    Truncate(Index),
    /// Append bytes.
    Extend(Vec<u8>),
    /// Declare another chunk length (over the cap, at it, or anything).
    RawLen(u32),
    /// Overwrite one of the header's fields (by byte offset 0, 1, 2, 8 or 12) with a value.
    Field(u8, u32),
    /// The header of this frame on the body of another.
    Splice(u8, usize, u64),
    /// Bytes that were never a frame.
    Random(Vec<u8>),
}

impl Mutation {
    /// Whether the damage leaves the body as the encoder wrote it, so that decoding gives
    /// an error or exactly the original bytes.
    fn keeps_body(&self) -> bool {
        matches!(
            self,
            Mutation::HeaderFlip(..)
                | Mutation::Truncate(_)
                | Mutation::Extend(_)
                | Mutation::RawLen(_)
                | Mutation::Field(..)
        )
    }

    /// Whether the damage must be refused.
    fn always_refused(&self, original: &[u8]) -> bool {
        match self {
            Mutation::Truncate(_) | Mutation::Extend(_) => true,
            Mutation::RawLen(n) => *n as usize > CAP || *n as usize != original.len(),
            _ => false,
        }
    }

    fn apply(&self, frame: &[u8]) -> Vec<u8> {
        let mut f = frame.to_vec();
        match self {
            Mutation::HeaderFlip(i, bit) => f[i.index(HEADER_LEN)] ^= 1 << (bit % 8),
            Mutation::BodyFlips(flips) => {
                let body = f.len() - HEADER_LEN;
                for (i, bit) in flips.iter().filter(|_| body > 0) {
                    f[HEADER_LEN + i.index(body)] ^= 1 << (bit % 8);
                }
            }
            Mutation::Truncate(i) => f.truncate(i.index(f.len())),
            Mutation::Extend(more) => f.extend_from_slice(more),
            Mutation::RawLen(n) => f[4..8].copy_from_slice(&n.to_le_bytes()),
            Mutation::Field(at, v) => {
                let at = [0usize, 1, 2, 8, 12][*at as usize % 5];
                let width = if at < 2 {
                    1
                } else if at == 2 {
                    2
                } else {
                    4
                };
                f[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
            }
            Mutation::Splice(kind, len, seed) => {
                let mut other = Vec::new();
                frame::encode(&chunk(*kind, *len, *seed), &mut other);
                f.truncate(HEADER_LEN);
                f.extend_from_slice(&other[HEADER_LEN..]);
            }
            Mutation::Random(bytes) => f = bytes.clone(),
        }
        f
    }
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let raw_len = prop_oneof![
        (CAP as u32 + 1)..=u32::MAX,
        Just(CAP as u32),
        Just(CAP as u32 - 1),
        any::<u32>(),
        0u32..70_000,
    ];
    prop_oneof![
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::HeaderFlip(i, b)),
        proptest::collection::vec((any::<Index>(), any::<u8>()), 1..=4)
            .prop_map(Mutation::BodyFlips),
        any::<Index>().prop_map(Mutation::Truncate),
        proptest::collection::vec(any::<u8>(), 1..64).prop_map(Mutation::Extend),
        raw_len.prop_map(Mutation::RawLen),
        (any::<u8>(), any::<u32>()).prop_map(|(a, v)| Mutation::Field(a, v)),
        (any::<u8>(), 0usize..40_000, any::<u64>()).prop_map(|(k, n, s)| Mutation::Splice(k, n, s)),
        proptest::collection::vec(any::<u8>(), 0..200).prop_map(Mutation::Random),
    ]
}

/// Decodes `bad` both ways and checks the promises above; `original` is the chunk the
/// undamaged frame held.
fn check(original: &[u8], m: &Mutation, bad: &[u8]) -> Result<(), TestCaseError> {
    let declared = declared(bad);
    let (r, largest, total) = counted(|| frame::decode(bad));
    let limit = match declared {
        Some(d) if d <= CAP => d + 1,
        _ => 0,
    };
    prop_assert!(
        largest <= limit.max(SLACK) && total <= 3 * limit + 4 * SLACK,
        "decode allocated {largest} bytes at once, {total} in all, for a frame declaring {declared:?}"
    );
    // `decode_into` a buffer of the declared length agrees with `decode`.
    let into_len = declared.filter(|&d| d <= CAP).unwrap_or(0);
    let mut buf = vec![0xa5u8; into_len];
    let (into, largest, _) = counted(|| frame::decode_into(bad, &mut buf));
    prop_assert!(
        largest <= into_len.max(SLACK) + 1,
        "decode_into allocated {largest} bytes"
    );
    match (&r, &into) {
        (Ok(v), Ok(())) => prop_assert!(*v == buf, "decode and decode_into differ"),
        (Err(_), Err(_)) => {}
        _ => prop_assert!(
            false,
            "decode {:?} but decode_into {:?}",
            r.is_ok(),
            into.is_ok()
        ),
    }
    // Another length is refused.
    let mut other = vec![0u8; into_len + 1];
    prop_assert!(frame::decode_into(bad, &mut other).is_err());
    let _ = frame::raw_len(bad);
    if let Ok(v) = r {
        prop_assert_eq!(
            Some(v.len()),
            declared,
            "decoded length is not the declared one"
        );
        if m.keeps_body() {
            prop_assert!(
                v == original,
                "{m:?} decoded to other bytes of the same length"
            );
        }
        prop_assert!(!m.always_refused(original), "{m:?} was accepted");
    }
    Ok(())
}

/// Cases of the fuzz: 4,000 (about 2 s in release), or `MODELCAS_FUZZ_CASES`.
fn cases() -> u32 {
    std::env::var("MODELCAS_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn damaged_frames_decode_to_an_error_or_the_declared_bytes(
        kind in any::<u8>(),
        len in prop_oneof![0usize..64, 64usize..4096, 4096usize..70_000],
        seed in any::<u64>(),
        m in mutation(),
    ) {
        let data = chunk(kind, len, seed);
        let mut f = Vec::new();
        frame::encode(&data, &mut f);
        prop_assert_eq!(frame::decode(&f).unwrap(), data.clone());
        let bad = m.apply(&f);
        check(&data, &m, &bad)?;
    }
}

/// Every declared length over the cap is refused with small allocations only, whatever the
/// codec and the body, and a frame at the cap whose body cannot fill it is refused too.
#[test]
fn declared_lengths_over_the_cap_allocate_nothing_large() {
    for codec in 0u8..=3 {
        for raw_len in [CAP as u32 + 1, CAP as u32 * 2, u32::MAX] {
            let mut f = vec![codec, 0b11, 0, 0];
            f.extend_from_slice(&raw_len.to_le_bytes());
            f.extend_from_slice(&8u32.to_le_bytes());
            f.extend_from_slice(&4u32.to_le_bytes());
            f.extend_from_slice(&[0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0, 0]);
            let (r, largest, total) = counted(|| frame::decode(&f));
            let err = r.unwrap_err();
            assert!(err.contains("more than any chunk"), "{err}");
            assert!(largest <= SLACK && total <= 4 * SLACK, "{largest} {total}");
        }
    }
}
