//! Formatting helpers: byte sizes and UTC timestamps for human output.

/// `1.50 GiB`-style sizes (binary units, through `indicatif::HumanBytes`).
pub fn bytes(n: u64) -> String {
    indicatif::HumanBytes(n).to_string()
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc(secs: u64) -> String {
    repo::manifest::utc_string(secs)
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats() {
        assert_eq!(super::utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::utc(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(super::bytes(512), "512 B");
        assert_eq!(super::bytes(1536), "1.50 KiB");
    }
}
