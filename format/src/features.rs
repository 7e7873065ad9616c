//! The store's feature list (`features`, envelope `MCASFEAT`, version 1): the names of the
//! format features beyond version 1 that a binary must implement to read the store
//! (`to_read`), and those it must implement to write to it (`to_write`; reading needs
//! `to_read` only). A store without the object has no such features. Every binary from
//! this one on checks the list when it opens a store and before it takes any lock or lease
//! to write, and refuses with a message naming the features it lacks, changing nothing; so
//! a later version can change the format in a way older binaries must not write over (a
//! new object kind gc would not know to keep, say) by adding a name here.
//!
//! This version implements no feature beyond version 1 ([`KNOWN`] is empty) and writes no
//! `features` object.

use bincode::{Decode, Encode};

use crate::codec::{self, Kind};
use crate::error::{FormatError, Result};
use crate::layout;

/// Features this build implements.
pub const KNOWN: &[&str] = &[];

/// Longest list and longest name accepted (a damaged object must not cost memory).
pub const MAX_FEATURES: usize = 256;
/// Longest feature name accepted.
pub const MAX_NAME: usize = 128;

/// The `features` object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Encode, Decode)]
pub struct Features {
    /// Needed to read the store (and so to write it).
    pub to_read: Vec<String>,
    /// Needed, besides `to_read`, to write to the store.
    pub to_write: Vec<String>,
}

impl Features {
    /// Features in `to_read` this build does not implement.
    pub fn missing_to_read(&self) -> Vec<String> {
        missing(&self.to_read)
    }

    /// Features in `to_read` or `to_write` this build does not implement.
    pub fn missing_to_write(&self) -> Vec<String> {
        let mut m = missing(&self.to_read);
        m.extend(missing(&self.to_write));
        m
    }
}

fn missing(names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|n| !KNOWN.contains(&n.as_str()))
        .cloned()
        .collect()
}

/// Decodes and checks the `features` object (names are printable ASCII, bounded).
pub fn decode(bytes: &[u8]) -> Result<Features> {
    let corrupt = |reason: String| FormatError::Corrupt {
        key: layout::FEATURES_KEY.to_string(),
        reason,
    };
    let f: Features = codec::decode(Kind::Features, bytes).map_err(|e| corrupt(e.to_string()))?;
    if f.to_read.len() + f.to_write.len() > MAX_FEATURES {
        return Err(corrupt("more features than any modelcas defines".into()));
    }
    for n in f.to_read.iter().chain(&f.to_write) {
        let printable = n.bytes().all(|b| b.is_ascii_graphic());
        if n.is_empty() || n.len() > MAX_NAME || !printable {
            return Err(corrupt(format!("feature name {n:?} is not a feature name")));
        }
    }
    Ok(f)
}

/// Encodes the object.
pub fn encode(f: &Features) -> Vec<u8> {
    codec::encode(Kind::Features, f, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_what_is_missing() {
        let f = Features {
            to_read: vec!["sparse-packs".into()],
            to_write: vec!["gc-v2".into()],
        };
        let bytes = encode(&f);
        assert_eq!(&bytes[..8], b"MCASFEAT");
        assert_eq!(decode(&bytes).unwrap(), f);
        assert_eq!(f.missing_to_read(), vec!["sparse-packs".to_string()]);
        assert_eq!(
            f.missing_to_write(),
            vec!["sparse-packs".to_string(), "gc-v2".to_string()]
        );
        assert!(Features::default().missing_to_write().is_empty());
        let bad = Features {
            to_read: vec!["no spaces".into()],
            to_write: vec![],
        };
        assert!(decode(&encode(&bad)).is_err());
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
    }
}
