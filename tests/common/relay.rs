//! A counting TCP relay: every connection to it is copied to a target address by two
//! threads, and the bytes the target sends are counted (a bucket's egress, counted outside
//! every modelcas process). S3 signatures cover the `Host` the client used, the relay's,
//! which the target checks as received: the relay changes no byte.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A relay listening on `addr` to `target`.
pub struct Relay {
    pub addr: String,
    egress: Arc<AtomicU64>,
}

impl Relay {
    /// Starts a relay to `target` (`host:port`) on a free loopback port.
    pub fn start(target: &str) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let egress = Arc::new(AtomicU64::new(0));
        let (count, target) = (egress.clone(), target.to_string());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(upstream) = TcpStream::connect(&target) else {
                    continue;
                };
                let (c2, u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
                std::thread::spawn(move || copy(client, upstream, None));
                let count = count.clone();
                std::thread::spawn(move || copy(u2, c2, Some(count)));
            }
        });
        Relay { addr, egress }
    }

    /// Bytes the target sent so far.
    pub fn egress(&self) -> u64 {
        self.egress.load(Ordering::Relaxed)
    }

    /// Counts from zero again.
    pub fn reset(&self) {
        self.egress.store(0, Ordering::Relaxed);
    }
}

fn copy(mut from: TcpStream, mut to: TcpStream, count: Option<Arc<AtomicU64>>) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(c) = &count {
            c.fetch_add(n as u64, Ordering::Relaxed);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
