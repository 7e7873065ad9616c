//! Formatting helpers: byte sizes and UTC timestamps for human output.

/// `1.5 GiB`-style sizes.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc(secs: u64) -> String {
    store::manifest::utc_string(secs)
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats() {
        assert_eq!(super::utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::utc(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(super::bytes(512), "512 B");
        assert_eq!(super::bytes(1536), "1.5 KiB");
    }
}
