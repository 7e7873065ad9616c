//! A whole shard, as hf_xet reads a global dedup answer (xet.md, "Global dedup answers"):
//! the header (footer size 200), an empty file section, one xorb with its chunks (their
//! hashes keyed with the answer's key), the xorb and chunk lookup tables, and the 200-byte
//! footer. Checked against hf_xet 1.8.0, which then sends no chunk the xorb holds.

use format::XetHash;

/// The first 32 bytes of a shard.
pub(crate) const TAG: [u8; 32] = [
    72, 70, 82, 101, 112, 111, 77, 101, 116, 97, 68, 97, 116, 97, 0, 85, 105, 103, 69, 106, 123,
    129, 87, 131, 165, 189, 217, 92, 205, 209, 74, 169,
];

const BOOKEND: [u8; 48] = {
    let mut b = [0u8; 48];
    let mut i = 0;
    while i < 32 {
        b[i] = 0xff;
        i += 1;
    }
    b
};

/// The shard listing xorb `hash` of `chunks` (hash, length), chunk hashes keyed with `key`
/// (BLAKE3 keyed with it over the chunk hash; all zero: not keyed), created at `now` and
/// expiring at `expiry` (unix seconds).
pub fn write(
    hash: &XetHash,
    chunks: &[(XetHash, u32)],
    key: &[u8; 32],
    now: u64,
    expiry: u64,
) -> Vec<u8> {
    let keyed = |h: &XetHash| match key == &[0; 32] {
        true => *h,
        false => XetHash(*blake3::keyed_hash(key, &h.0).as_bytes()),
    };
    let mut out = Vec::with_capacity(48 * (chunks.len() + 4) + 16 * chunks.len() + 220);
    out.extend_from_slice(&TAG);
    out.extend_from_slice(&2u64.to_le_bytes());
    out.extend_from_slice(&200u64.to_le_bytes());
    let file_info = out.len() as u64;
    out.extend_from_slice(&BOOKEND);
    let xorb_info = out.len() as u64;
    let total: u64 = chunks.iter().map(|c| u64::from(c.1)).sum();
    out.extend_from_slice(&hash.0);
    for v in [0u32, chunks.len() as u32, total as u32, 0] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    let mut lookup = Vec::with_capacity(chunks.len());
    let mut start = 0u32;
    for (i, (h, len)) in chunks.iter().enumerate() {
        let k = keyed(h);
        out.extend_from_slice(&k.0);
        for v in [start, *len, 0, 0] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        start = start.wrapping_add(*len);
        lookup.push((
            u64::from_le_bytes(k.0[..8].try_into().unwrap_or_default()),
            i as u32,
        ));
    }
    out.extend_from_slice(&BOOKEND);
    let file_lookup = out.len() as u64;
    let xorb_lookup = out.len() as u64;
    out.extend_from_slice(
        &u64::from_le_bytes(hash.0[..8].try_into().unwrap_or_default()).to_le_bytes(),
    );
    out.extend_from_slice(&0u32.to_le_bytes());
    let chunk_lookup = out.len() as u64;
    lookup.sort_unstable();
    for (k, i) in &lookup {
        out.extend_from_slice(&k.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&i.to_le_bytes());
    }
    let footer = out.len() as u64;
    for v in [
        1,
        file_info,
        xorb_info,
        file_lookup,
        0,
        xorb_lookup,
        1,
        chunk_lookup,
        lookup.len() as u64,
    ] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(key);
    out.extend_from_slice(&now.to_le_bytes());
    out.extend_from_slice(&expiry.to_le_bytes());
    out.extend_from_slice(&[0u8; 48]);
    for v in [0, 0, 0, footer] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_the_one_hf_xet_reads() {
        let chunks: Vec<(XetHash, u32)> = (0..3u8)
            .map(|i| (xethash::chunk_hash(&[i]), 100 + u32::from(i)))
            .collect();
        let x = XetHash([9; 32]);
        let b = write(&x, &chunks, &[0; 32], 10, 20);
        // header 48, file bookend 48, xorb header 48, 3 chunks 144, bookend 48, xorb lookup
        // 12, chunk lookup 3 x 16, footer 200.
        assert_eq!(b.len(), 48 * 6 + 48 + 12 + 48 + 200);
        let footer = b.len() - 200;
        assert_eq!(
            u64::from_le_bytes(b[b.len() - 8..].try_into().unwrap()),
            footer as u64
        );
        assert_eq!(u64::from_le_bytes(b[40..48].try_into().unwrap()), 200);
        assert_eq!(&b[96..128], &x.0);
        assert_eq!(&b[144..176], &chunks[0].0 .0, "unkeyed with a zero key");
        assert_eq!(
            u32::from_le_bytes(b[176 + 48..180 + 48].try_into().unwrap()),
            100,
            "second chunk starts at 100"
        );
        let keyed = write(&x, &chunks, &[1; 32], 10, 20);
        assert_eq!(
            &keyed[144..176],
            blake3::keyed_hash(&[1; 32], &chunks[0].0 .0).as_bytes()
        );
        assert_eq!(&keyed[footer + 72..footer + 104], &[1; 32]);
    }
}
