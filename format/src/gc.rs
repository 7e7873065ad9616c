//! The condemned list (`gc/condemned`, magic `MCASGCST`): the packs gc has marked for
//! deletion and when. Written only by the holder of the gc lock; read by gc (phase two)
//! and by every index sync, which treats a condemned pack as already gone. Reading and
//! writing it in a bucket is `store::gc::state`.

use bincode::{Decode, Encode};

use crate::codec::{self, Kind};
use crate::error::{FormatError, Result};
use crate::layout;
use crate::pack::PackId;

/// One pack marked for deletion.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct Condemned {
    /// The pack.
    pub pack: PackId,
    /// When it was marked, by the object store's clock (ms since the epoch).
    pub marked_ms: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Chunks it holds (from its footer).
    pub chunks: u32,
    /// Live chunks it held when marked (non-zero for packs replaced by a rewrite).
    pub live_chunks: u32,
}

/// The whole list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Encode, Decode)]
pub struct GcState {
    /// Packs awaiting deletion.
    pub condemned: Vec<Condemned>,
    /// When it was written, by the object store's clock (ms since the epoch).
    pub written_ms: u64,
}

/// The bytes of the list (zstd-compressed payload).
pub fn encode(state: &GcState) -> Vec<u8> {
    codec::encode(Kind::GcState, state, true)
}

/// Decodes the list read from [`layout::CONDEMNED_KEY`].
pub fn decode(bytes: &[u8]) -> Result<GcState> {
    codec::decode(Kind::GcState, bytes).map_err(|e| FormatError::Corrupt {
        key: layout::CONDEMNED_KEY.into(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Taken from the code before the types moved here (store/tests/golden_records.rs):
    /// the payload uncompressed, and the object as gc writes it.
    const GOLDEN_PLAIN: &str = "4d434153474353540100000002ababababababababababababababababababababababababababababababababfd0068e5cf8b010000fc0000000482030101010101010101010101010101010101010101010101010101010101010101fd0168e5cf8b010000fa0100fdf469e5cf8b0100001c6ce1bff7b8ec03d15105341a8b3af37835a74eff1db05a619b5d732784c96b";
    const GOLDEN: &str = "4d434153474353540100010028b52ffd2066650100140202abfd0068e5cf8b010000fc00000004820301fd01fa0100fdf469e5cf8b0100000300536538685603b0992829906befa5e60f2d211445040f927e88a262c1a235905c0ed22e7cc99951";

    #[test]
    fn bytes_are_the_ones_written_before_the_move() {
        let state = GcState {
            condemned: vec![
                Condemned {
                    pack: PackId([0xAB; 32]),
                    marked_ms: 1_700_000_000_000,
                    size: 64 << 20,
                    chunks: 130,
                    live_chunks: 3,
                },
                Condemned {
                    pack: PackId([0x01; 32]),
                    marked_ms: 1_700_000_000_001,
                    size: 250,
                    chunks: 1,
                    live_chunks: 0,
                },
            ],
            written_ms: 1_700_000_000_500,
        };
        let plain = codec::encode(Kind::GcState, &state, false);
        assert_eq!(hex::encode(&plain), GOLDEN_PLAIN);
        assert_eq!(hex::encode(encode(&state)), GOLDEN);
        assert_eq!(decode(&hex::decode(GOLDEN).unwrap()).unwrap(), state);
        assert_eq!(decode(&plain).unwrap(), state);
        let err = decode(&plain[..40]).unwrap_err().to_string();
        assert!(err.contains("gc/condemned"), "{err}");
    }
}
