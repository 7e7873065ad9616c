//! The S3 backend against a server that throttles: 503 SlowDown twice, then the object.
//! The SDK's retries absorb it, the bytes are right, and the retries show in the metrics.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use objects::{ObjectStore, S3Options, S3Store};

#[test]
fn throttling_is_retried_and_counted() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
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
            let n = h.fetch_add(1, Ordering::SeqCst);
            let (status, body): (&str, &[u8]) = if n < 2 {
                ("503 Slow Down", b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>")
            } else {
                ("200 OK", b"hello, weights")
            };
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(body);
        }
    });
    std::env::set_var("AWS_ACCESS_KEY_ID", "test-key");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "test-secret");
    let opts = S3Options {
        endpoint: Some(format!("http://127.0.0.1:{port}")),
        region: Some("us-east-1".into()),
        path_style: Some(true),
    };
    let s3 = S3Store::new("s3://bucket/prefix", &opts).unwrap();
    let retries = || {
        let mut r = prometheus_client::registry::Registry::with_prefix("modelcas");
        repo::metrics::register(&mut r);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        text.lines()
            .find(|l| l.starts_with("modelcas_backend_retries_total "))
            .and_then(|l| l.rsplit(' ').next())
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let before = retries();
    assert_eq!(s3.get("packs/aa/key").unwrap(), b"hello, weights");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        3,
        "two throttled attempts, then the object"
    );
    assert_eq!(retries() - before, 2);
}
