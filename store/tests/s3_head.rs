//! The S3 backend's HEADs (`size` and `stat`) against a fake server: an object's length,
//! ETag and modification time, `None` for a missing key, one request per call, and a
//! refusal (403) reported as an error naming the key, never as a missing object.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;

use objects::{ObjectStore, S3Options, S3Store};
use parking_lot::Mutex;

/// Serves HEADs: `present` (14 bytes), `broken` (403), anything else 404. Records each
/// request's first line.
fn fake_s3(seen: Arc<Mutex<Vec<String>>>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let mut s = stream.unwrap();
            let mut req = Vec::new();
            let mut buf = [0u8; 4096];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                req.extend_from_slice(&buf[..n]);
            }
            let line = String::from_utf8_lossy(&req)
                .lines()
                .next()
                .unwrap_or("")
                .to_string();
            seen.lock().push(line.clone());
            let head = if line.starts_with("HEAD /bucket/prefix/objects/present ") {
                "200 OK\r\nContent-Length: 14\r\nETag: \"abc\"\r\n\
                 Last-Modified: Wed, 02 Dec 2026 10:00:00 GMT"
            } else if line.starts_with("HEAD /bucket/prefix/objects/broken ") {
                "403 Forbidden\r\nContent-Length: 0"
            } else {
                "404 Not Found\r\nContent-Length: 0"
            };
            let _ = write!(s, "HTTP/1.1 {head}\r\nConnection: close\r\n\r\n");
        }
    });
    port
}

#[test]
fn size_and_stat_are_one_head_each() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let port = fake_s3(seen.clone());
    std::env::set_var("AWS_ACCESS_KEY_ID", "test-key");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "test-secret");
    let opts = S3Options {
        endpoint: Some(format!("http://127.0.0.1:{port}")),
        region: Some("us-east-1".into()),
        path_style: Some(true),
    };
    let s3 = S3Store::new("s3://bucket/prefix", &opts).unwrap();

    assert_eq!(s3.size("objects/present").unwrap(), Some(14));
    assert_eq!(s3.size("objects/missing").unwrap(), None);
    let meta = s3.stat("objects/present").unwrap().unwrap();
    assert_eq!(meta.key, "objects/present");
    assert_eq!(meta.size, 14);
    assert_eq!(meta.tag, "\"abc\"");
    let modified = meta.modified.unwrap();
    let secs = modified
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(secs, 1_796_205_600, "Wed, 02 Dec 2026 10:00:00 GMT");
    assert!(s3.stat("objects/missing").unwrap().is_none());
    let heads = seen.lock().len();
    assert_eq!(heads, 4, "one HEAD per call: {:?}", seen.lock());

    // A refusal is an error that names the key, whichever call met it.
    for e in [
        s3.size("objects/broken").map(|_| ()).unwrap_err(),
        s3.stat("objects/broken").map(|_| ()).unwrap_err(),
    ] {
        assert!(e.to_string().contains("objects/broken"), "{e}");
        assert!(!e.is_not_found(), "{e}");
    }
}
