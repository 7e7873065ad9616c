//! Chunk size parameters and their validation.

use format::MAX_CHUNK_LEN;

// The largest chunk any valid [`ChunkParams`] can cut (`max` is at most this) is FastCDC
// 2020's upper bound for its maximum size, which the format fixes as the largest chunk
// every reader accepts: the two must never differ.
const _: () = assert!(MAX_CHUNK_LEN as usize == fastcdc::v2020::MAXIMUM_MAX);

/// Minimum, average (target) and maximum chunk sizes in bytes.
///
/// The defaults (128 KiB / 512 KiB / 2 MiB) were chosen from measurements on the generated
/// model revisions; `docs/format/bytes.md` ("Chunking parameters") gives the figures and the
/// reasoning. Changing them changes every boundary, so a store records the parameters it
/// was created with and every writer uses those.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkParams {
    /// No chunk is shorter, except the last chunk of a stream.
    pub min: u32,
    /// The size the boundary masks aim for.
    pub avg: u32,
    /// No chunk is longer; it also sizes the streaming buffer.
    pub max: u32,
}

/// Parameters outside what FastCDC accepts.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParamsError {
    /// Not min < avg < max.
    #[error("chunk sizes must satisfy min < avg < max (got {min}/{avg}/{max})")]
    Order { min: u32, avg: u32, max: u32 },
    /// A size outside FastCDC's limits.
    #[error("chunk size {name}={value} is outside FastCDC's range {lo}..={hi}")]
    Range {
        name: &'static str,
        value: u32,
        lo: u32,
        hi: u32,
    },
    /// FastCDC needs even sizes.
    #[error("chunk size {name}={value} must be even")]
    Odd { name: &'static str, value: u32 },
}

impl Default for ChunkParams {
    fn default() -> Self {
        ChunkParams {
            min: 128 * 1024,
            avg: 512 * 1024,
            max: 2 * 1024 * 1024,
        }
    }
}

impl ChunkParams {
    /// The parameters a store was created with (its config, `MCASCONF`), unchecked.
    pub fn of_config(config: &format::manifest::StoreConfig) -> Self {
        ChunkParams {
            min: config.chunk_min,
            avg: config.chunk_avg,
            max: config.chunk_max,
        }
    }

    /// Tiny sizes (1/4/16 KiB) so that tests hit many boundaries with little data.
    pub fn tiny() -> Self {
        ChunkParams {
            min: 1024,
            avg: 4096,
            max: 16384,
        }
    }

    /// Parameters around an average `avg`: min = avg/4, max = avg*4, the ratio used by the
    /// defaults.
    pub fn around(avg: u32) -> Self {
        ChunkParams {
            min: avg / 4,
            avg,
            max: avg.saturating_mul(4),
        }
    }

    /// Checks the constraints of `fastcdc::v2020`.
    pub fn validate(&self) -> Result<(), ParamsError> {
        use fastcdc::v2020::*;
        let checks = [
            ("min", self.min, MINIMUM_MIN, MINIMUM_MAX),
            ("avg", self.avg, AVERAGE_MIN, AVERAGE_MAX),
            ("max", self.max, MAXIMUM_MIN, MAXIMUM_MAX),
        ];
        for (name, value, lo, hi) in checks {
            if (value as usize) < lo || (value as usize) > hi {
                return Err(ParamsError::Range {
                    name,
                    value,
                    lo: lo as u32,
                    hi: hi as u32,
                });
            }
            if value % 2 != 0 {
                return Err(ParamsError::Odd { name, value });
            }
        }
        if !(self.min < self.avg && self.avg < self.max) {
            return Err(ParamsError::Order {
                min: self.min,
                avg: self.avg,
                max: self.max,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        ChunkParams::default().validate().unwrap();
        ChunkParams::tiny().validate().unwrap();
        ChunkParams::around(65536).validate().unwrap();
    }

    #[test]
    fn rejects_bad_sizes() {
        assert!(matches!(
            ChunkParams {
                min: 10,
                avg: 4096,
                max: 16384
            }
            .validate(),
            Err(ParamsError::Range { name: "min", .. })
        ));
        assert!(matches!(
            ChunkParams {
                min: 8192,
                avg: 4096,
                max: 16384
            }
            .validate(),
            Err(ParamsError::Order { .. })
        ));
        assert!(matches!(
            ChunkParams {
                min: 1025,
                avg: 4096,
                max: 16384
            }
            .validate(),
            Err(ParamsError::Odd { .. })
        ));
    }
}
