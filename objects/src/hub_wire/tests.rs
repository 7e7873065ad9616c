//! The store API's names: one spelling per block and per object, ranges that cover
//! exactly the bytes asked, pages that are checked.

use super::*;

fn pack(b: u8) -> PackId {
    PackId([b; 32])
}

#[test]
fn blocks_cover_exactly_the_bytes_asked() {
    assert_eq!(blocks(0, 0), None);
    assert_eq!(blocks(0, 1), Some((0, 0)));
    assert_eq!(blocks(BLOCK_LEN - 1, 2), Some((0, 1)));
    assert_eq!(blocks(BLOCK_LEN, BLOCK_LEN), Some((1, 1)));
    assert_eq!(blocks(u64::MAX, 2), None, "an overflowing range");
    // Every byte of a range lies in one of its blocks, and each block holds one of them.
    for (offset, len) in [(5, 3 * BLOCK_LEN), (BLOCK_LEN * 7 + 9, 17), (0, BLOCK_LEN)] {
        let (first, last) = blocks(offset, len).unwrap();
        assert!(first * BLOCK_LEN <= offset);
        assert!((last + 1) * BLOCK_LEN >= offset + len);
        assert!(last * BLOCK_LEN < offset + len && (first + 1) * BLOCK_LEN > offset);
    }
}

#[test]
fn block_ranges_end_at_the_pack() {
    let size = 2 * BLOCK_LEN + 10;
    assert_eq!(block_range(0, size), Some((0, BLOCK_LEN)));
    assert_eq!(block_range(2, size), Some((2 * BLOCK_LEN, size)));
    assert_eq!(block_range(3, size), None);
    assert_eq!(block_range(u64::MAX, size), None);
    assert_eq!(block_range(0, 0), None);
}

#[test]
fn a_block_has_one_spelling() {
    let id = pack(0xab);
    let path = block_path(&id, 17);
    assert_eq!(path, format!("packs/ab/{}/17", "ab".repeat(32)));
    assert_eq!(parse_block_path(&path), Ok((id, 17)));
    assert_eq!(parse_block_path(&block_path(&id, 0)), Ok((id, 0)));
    let hex = "ab".repeat(32);
    for bad in [
        format!("packs/ab/{hex}/017"),
        format!("packs/ab/{hex}/+17"),
        format!("packs/ab/{hex}/-1"),
        format!("packs/ab/{hex}/"),
        format!("packs/ab/{hex}/1e3"),
        format!("packs/ab/{hex}/99999999999999999999999"),
        format!("packs/AB/{}/1", hex.to_uppercase()),
        format!("packs/ab/{}/1", hex.to_uppercase()),
        format!("packs/cd/{hex}/1"),
        format!("packs/ab/{hex}"),
        format!("packs//{hex}/1"),
        format!("moved/ab/{hex}/1"),
        format!("packs/ab/{hex}/1/2"),
    ] {
        assert!(parse_block_path(&bad).is_err(), "{bad}");
    }
}

#[test]
fn only_what_readers_need_is_served() {
    for key in [
        "config",
        "features",
        "packs/ab/x",
        "moved/ab/x",
        "repos/org/name/refs/main",
    ] {
        assert!(served_key(key), "{key}");
    }
    for key in [
        "locks/gc",
        "gc/condemned",
        "runs/x",
        "tmp/x",
        "configs",
        "repos",
    ] {
        assert!(!served_key(key), "{key}");
    }
}

#[test]
fn hub_tags_are_safe_and_stable() {
    let weird = "\"etag\" with\nnewline?&=";
    let t = hub_tag(weird);
    assert!(is_hub_tag(&t), "{t}");
    assert_eq!(t, hub_tag(weird), "the same on every replica");
    assert_ne!(t, hub_tag("\"etag\""));
    assert_eq!(
        object_path("repos/o/n/refs/main", &t),
        format!("objects/repos/o/n/refs/main?tag={t}")
    );
    for bad in [
        "",
        "t-",
        "t-ABCDEF0123456789abcdef0123456789",
        "x-0123",
        "t-0g",
    ] {
        assert!(!is_hub_tag(bad), "{bad}");
    }
}

fn meta(key: &str) -> WireMeta {
    WireMeta {
        key: key.into(),
        size: 1,
        tag: hub_tag(key),
        modified_ms: None,
    }
}

#[test]
fn listing_pages_are_checked() {
    let page = ListPage {
        objects: vec![meta("repos/a"), meta("repos/b")],
        next: Some("repos/b".into()),
    };
    assert_eq!(page.check("repos/", None), Ok(()));
    assert_eq!(page.check("repos/", Some("repos/0")), Ok(()));
    assert!(
        page.check("repos/", Some("repos/a")).is_err(),
        "not after `after`"
    );
    assert!(page.check("packs/", None).is_err(), "outside the prefix");
    let unsorted = ListPage {
        objects: vec![meta("repos/b"), meta("repos/a")],
        next: None,
    };
    assert!(unsorted.check("repos/", None).is_err());
    let dup = ListPage {
        objects: vec![meta("repos/a"), meta("repos/a")],
        next: None,
    };
    assert!(dup.check("repos/", None).is_err());
    let wrong_next = ListPage {
        objects: vec![meta("repos/a")],
        next: Some("repos/z".into()),
    };
    assert!(wrong_next.check("repos/", None).is_err());
    let empty_with_next = ListPage {
        objects: vec![],
        next: Some("repos/a".into()),
    };
    assert!(
        empty_with_next.check("repos/", None).is_err(),
        "a page that goes nowhere"
    );
    let too_many = ListPage {
        objects: (0..=LIST_PAGE)
            .map(|i| meta(&format!("repos/{i:08}")))
            .collect(),
        next: None,
    };
    assert!(too_many.check("repos/", None).is_err());
}

#[test]
fn pages_travel_as_json() {
    let page = ListPage {
        objects: vec![WireMeta {
            modified_ms: Some(1_700_000_000_000),
            ..meta("repos/a")
        }],
        next: None,
    };
    let json = serde_json::to_string(&page).unwrap();
    assert_eq!(serde_json::from_str::<ListPage>(&json).unwrap(), page);
    let old: ListPage =
        serde_json::from_str(r#"{"objects":[{"key":"k","size":2,"tag":"t"}],"next":null}"#)
            .unwrap();
    assert_eq!(old.objects[0].modified_ms, None);
}
