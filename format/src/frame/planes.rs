//! Byte planes of the bg2 codec: a chunk's bytes at even offsets (plane 0, which also holds
//! the last byte of an odd-length chunk) and at odd offsets (plane 1), split apart for
//! encoding and interleaved back for decoding.

/// Splits even and odd bytes of `data` into `p0` and `p1` (replacing what they held).
pub(super) fn split_planes_into(data: &[u8], p0: &mut Vec<u8>, p1: &mut Vec<u8>) {
    p0.clear();
    p0.resize(data.len().div_ceil(2), 0);
    p1.clear();
    p1.resize(data.len() / 2, 0);
    let done = split_planes_simd(data, p0, p1);
    split_planes_words(&data[done..], &mut p0[done / 2..], &mut p1[done / 2..]);
}

/// Splits what the CPU's vector instructions can of `data` into `p0` and `p1`; returns the
/// bytes of `data` done (a multiple of 64; 0 without AVX2).
fn split_planes_simd(data: &[u8], p0: &mut [u8], p1: &mut [u8]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is present, checked just above.
        return unsafe { split_planes_avx2(data, p0, p1) };
    }
    let _ = (data, p0, p1);
    0
}

/// Splits the leading 64-byte blocks of `data` with AVX2 shuffles (about 40 GB/s here,
/// against 3-8 GB/s for [`split_planes_words`]); returns the bytes of `data` done.
/// `p0` and `p1` hold at least `data.len() / 2` bytes each.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn split_planes_avx2(data: &[u8], p0: &mut [u8], p1: &mut [u8]) -> usize {
    use std::arch::x86_64::*;
    let blocks = data.len() / 64;
    assert!(p0.len() >= blocks * 32 && p1.len() >= blocks * 32);
    // In each 128-bit lane: the 8 even bytes, then the 8 odd ones.
    let lanes = _mm256_setr_epi8(
        0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, //
        0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
    );
    for i in 0..blocks {
        // SAFETY: block i spans data[64i..64i+64] and p0/p1[32i..32i+32], all in bounds
        // (asserted above); the loads and stores are unaligned ones.
        unsafe {
            let a = _mm256_loadu_si256(data.as_ptr().add(i * 64) as *const __m256i);
            let b = _mm256_loadu_si256(data.as_ptr().add(i * 64 + 32) as *const __m256i);
            // [even 0-7, odd 0-7 | even 8-15, odd 8-15] -> [even 0-15 | odd 0-15]
            let a = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(a, lanes), 0b11_01_10_00);
            let b = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(b, lanes), 0b11_01_10_00);
            let even = _mm256_permute2x128_si256(a, b, 0x20);
            let odd = _mm256_permute2x128_si256(a, b, 0x31);
            _mm256_storeu_si256(p0.as_mut_ptr().add(i * 32) as *mut __m256i, even);
            _mm256_storeu_si256(p1.as_mut_ptr().add(i * 32) as *mut __m256i, odd);
        }
    }
    blocks * 64
}

/// Splits even and odd bytes, 16 at a time in two words, where AVX2 is absent and for what
/// [`split_planes_avx2`] leaves. `p0` holds `data.len().div_ceil(2)` bytes, `p1`
/// `data.len() / 2`.
fn split_planes_words(data: &[u8], p0: &mut [u8], p1: &mut [u8]) {
    // 16 bytes at a time: gather the even and the odd bytes of two little-endian words.
    let blocks = data.len() / 16;
    for i in 0..blocks {
        let w = &data[i * 16..i * 16 + 16];
        let a = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        let b = u64::from_le_bytes([w[8], w[9], w[10], w[11], w[12], w[13], w[14], w[15]]);
        p0[i * 8..i * 8 + 8]
            .copy_from_slice(&(gather_even(a) | (gather_even(b) << 32)).to_le_bytes());
        p1[i * 8..i * 8 + 8]
            .copy_from_slice(&(gather_even(a >> 8) | (gather_even(b >> 8) << 32)).to_le_bytes());
    }
    let done = blocks * 16;
    for (j, pair) in data[done..].chunks_exact(2).enumerate() {
        p0[blocks * 8 + j] = pair[0];
        p1[blocks * 8 + j] = pair[1];
    }
    if data.len() % 2 == 1 {
        p0[data.len() / 2] = data[data.len() - 1];
    }
}

/// Splits even and odd bytes into new vectors (the tests' form of [`split_planes_into`]).
#[cfg(test)]
fn split_planes(data: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let (mut p0, mut p1) = (Vec::new(), Vec::new());
    split_planes_into(data, &mut p0, &mut p1);
    (p0, p1)
}

/// The bytes at even positions of `x` (little endian), packed into the low 32 bits.
#[inline(always)]
fn gather_even(x: u64) -> u64 {
    let x = x & 0x00ff_00ff_00ff_00ff;
    let x = (x | (x >> 8)) & 0x0000_ffff_0000_ffff;
    (x | (x >> 16)) & 0x0000_0000_ffff_ffff
}

/// Interleaves the planes back (inverse of [`split_planes`]).
#[cfg(test)]
fn merge_planes(p0: &[u8], p1: &[u8], raw_len: usize) -> Vec<u8> {
    let mut out = vec![0u8; raw_len];
    merge_into(p0, p1, &mut out);
    out
}

/// Interleaves the planes into `out` (`p0` holds `out.len().div_ceil(2)` bytes, `p1`
/// `out.len() / 2`). The compiler vectorizes this loop (about 20 GB/s here; word-wise
/// shifts as in [`split_planes`] measured 3x slower).
pub(super) fn merge_into(p0: &[u8], p1: &[u8], out: &mut [u8]) {
    for ((pair, a), b) in out.chunks_exact_mut(2).zip(p0.iter()).zip(p1.iter()) {
        pair[0] = *a;
        pair[1] = *b;
    }
    if out.len() % 2 == 1 {
        out[out.len() - 1] = p0[p0.len() - 1];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planes_split_and_merge() {
        // Lengths around the 16-byte words and the 64-byte AVX2 blocks, and planes that
        // held other bytes before (the encoder reuses them).
        let (mut r0, mut r1) = (vec![0xa5u8; 5000], vec![0x5au8; 3]);
        for n in [
            0usize, 1, 2, 15, 16, 17, 31, 33, 63, 64, 65, 127, 128, 129, 1000, 1001, 4097,
        ] {
            let data: Vec<u8> = (0..n).map(|i| (i * 7 + 3 + i / 256) as u8).collect();
            let even: Vec<u8> = data.iter().step_by(2).copied().collect();
            let odd: Vec<u8> = data.iter().skip(1).step_by(2).copied().collect();
            let (p0, p1) = split_planes(&data);
            assert_eq!((&p0, &p1), (&even, &odd), "n = {n}");
            split_planes_into(&data, &mut r0, &mut r1);
            assert_eq!((&r0, &r1), (&even, &odd), "n = {n}, reused planes");
            // The word-wise split alone, as on a CPU without AVX2.
            let (mut w0, mut w1) = (vec![0u8; even.len()], vec![0u8; odd.len()]);
            split_planes_words(&data, &mut w0, &mut w1);
            assert_eq!((&w0, &w1), (&even, &odd), "n = {n}, words");
            assert_eq!(merge_planes(&p0, &p1, n), data);
        }
    }
}
