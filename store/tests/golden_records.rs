//! Golden bytes of the persisted records whose types moved into the `format` crate (issue
//! 27 point 3): the lock object, the condemned list, a bundle's framing and ref, and the
//! local index's `files/` and `stamps/` records. The vectors were taken from the code
//! before the move (commit 2926524, on the code before it) and are checked
//! through the writers' own paths (the object a gc writes, the bundle an export writes, the
//! record the index stores), so the move cannot have changed a byte.

use format::bundle::BundleRef;
use format::codec::{self, Kind};
use format::gc::{Condemned, GcState};
use format::index::{chunk_list_digest, FileStamp};
use format::layout;
use format::lock::LockObject;
use format::names::{CommitId, RepoId};
use format::pack::PackId;
use format::{ChunkId, Sha256};
use objects::{MemoryStore, ObjectStore};
use store::gc::state;

fn lock() -> LockObject {
    LockObject {
        kind: "ingest".into(),
        host: "node-1 pid:[4026531836]".into(),
        pid: 4242,
        started_ms: 1_700_000_000_123,
        refreshed_ms: 1_700_000_060_000,
        ttl_ms: 600_000,
    }
}

const LOCK: &str = "4d4341534c4f434b0100000006696e67657374176e6f64652d31207069643a5b343032363533313833365dfb9210fd7b68e5cf8b010000fd6052e6cf8b010000fcc0270900ad6e43adc2b94e0eb09535741bb710fd83a2502490f891e082db8c612dd908f1";

#[test]
fn lock_object_bytes() {
    let bytes = codec::encode(Kind::Lock, &lock(), false);
    assert_eq!(hex::encode(&bytes), LOCK);
    assert_eq!(
        codec::decode::<LockObject>(Kind::Lock, &bytes).unwrap(),
        lock()
    );
}

fn gc_state() -> GcState {
    GcState {
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
    }
}

/// The payload uncompressed (the object gc writes is zstd-compressed).
const GC_STATE_PLAIN: &str = "4d434153474353540100000002ababababababababababababababababababababababababababababababababfd0068e5cf8b010000fc0000000482030101010101010101010101010101010101010101010101010101010101010101fd0168e5cf8b010000fa0100fdf469e5cf8b0100001c6ce1bff7b8ec03d15105341a8b3af37835a74eff1db05a619b5d732784c96b";
const GC_STATE: &str = "4d434153474353540100010028b52ffd2066650100140202abfd0068e5cf8b010000fc00000004820301fd01fa0100fdf469e5cf8b0100000300536538685603b0992829906befa5e60f2d211445040f927e88a262c1a235905c0ed22e7cc99951";

#[test]
fn condemned_list_bytes() {
    let plain = codec::encode(Kind::GcState, &gc_state(), false);
    assert_eq!(hex::encode(&plain), GC_STATE_PLAIN);
    let store = MemoryStore::new();
    state::write(&store, &gc_state()).unwrap();
    let written = store.get(layout::CONDEMNED_KEY).unwrap();
    assert_eq!(hex::encode(&written), GC_STATE);
    assert_eq!(state::read(&store).unwrap(), gc_state());
}

const BUNDLE_REF: &str = "4d4341534252454601000000036f7267056d6f64656c046d61696e1111111111111111111111111111111111111111a035ee924af4e9e1cd72d6419ec8ea89a2e8adb548bb8358a5e22974703300fb";

#[test]
fn bundle_ref_bytes() {
    let r = BundleRef {
        repo: RepoId::parse("org/model").unwrap(),
        name: "main".into(),
        commit: CommitId([0x11; 20]),
    };
    let bytes = codec::encode(Kind::BundleRef, &r, false);
    assert_eq!(hex::encode(&bytes), BUNDLE_REF);
    assert_eq!(
        codec::decode::<BundleRef>(Kind::BundleRef, &bytes).unwrap(),
        r
    );
}

/// An empty bundle: the header and the end record (no records, the BLAKE3 of the header).
const EMPTY_BUNDLE: &str = "4d434153424e444c01000000ff28000000000000000000000000000000b4d9f1006c61215750453242e8b6c185454b5b43b21633d86411f2deb1fb7f39";

#[test]
fn empty_bundle_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let store = repo::Store::open_or_create(
        std::sync::Arc::new(MemoryStore::new()),
        repo::CreateOptions::default(),
    )
    .unwrap();
    let mut out = Vec::new();
    let spec = store::bundle::ExportSpec::default();
    store::bundle::export(&store, &spec, &mut out, &read::progress::NoProgress).unwrap();
    assert_eq!(hex::encode(&out), EMPTY_BUNDLE);
    let index = index::Index::open(dir.path(), &store.config().store_id).unwrap();
    let r =
        store::bundle::import(&store, &index, &mut &out[..], &read::progress::NoProgress).unwrap();
    assert_eq!((r.revisions.len(), r.chunks), (0, 0));
}

fn chunks() -> Vec<(ChunkId, u32)> {
    vec![(ChunkId::of(b"first"), 5), (ChunkId::of(b"second"), 6)]
}

const FILE_RECORD: &str = "0200000022896bcbc3d1c76a0b90c4c3523dbea532ad63196fafdbd52cced52200d3dae405000000cd85637651ec7a557bddd61c5ddd1df21ad8bbbaf6c3c098482b3ed1c101496406000000";
const STAMP_RECORD: &str = "4d43415353544d5001000000b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0000000000200000001080000000000004d000000000000000b0000000000000015cd853dfe9c9717fbffffffffffffff5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5ab57ca4f4a784c9474d287d19048306a43632cbad8e2a000e87d79c367da74d210674c5db4ac76e271acf85e57aa73a4f98e9f0d8e0c16d75e516bcf98889ade7";
const CHUNK_LIST_DIGEST: &str = "b57ca4f4a784c9474d287d19048306a43632cbad8e2a000e87d79c367da74d21";

#[test]
fn index_records_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let idx = index::Index::open(dir.path(), &[7; 16]).unwrap();
    let sha = Sha256([0x5A; 32]);
    idx.remember_file(&sha, &chunks()).unwrap();
    let files = idx
        .cached_object(&format!("files/{}", hex::encode(sha.0)), "")
        .unwrap()
        .unwrap();
    assert_eq!(hex::encode(&files), FILE_RECORD);
    assert_eq!(
        hex::encode(chunk_list_digest(&chunks()).0),
        CHUNK_LIST_DIGEST
    );
    let st = FileStamp {
        boot_id: [0xB0; 16],
        mount_id: 1 << 33,
        dev: 2049,
        ino: 77,
        size: 11,
        mtime_ns: 1_700_000_000_123_456_789,
        ctime_ns: -5,
    };
    idx.remember_stamp(&st, &sha, &chunks()).unwrap();
    let stamp = idx
        .cached_object(&format!("stamps/{:016x}/{:016x}", st.dev, st.ino), "")
        .unwrap()
        .unwrap();
    assert_eq!(hex::encode(&stamp), STAMP_RECORD);
}
