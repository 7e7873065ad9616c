//! gc's cache of small objects (manifests): an object's bytes under the tag its listing
//! showed (`manifests` family), valid while the listing shows the same tag.

use format::index as values;
use repo::Result;

use crate::db::{Index, CF_MANIFESTS};

impl Index {
    /// Caches an object's bytes under its listing tag.
    pub fn cache_object(&self, key: &str, tag: &str, bytes: &[u8]) -> Result<()> {
        let Some(v) = values::tagged(tag, bytes) else {
            return Ok(());
        };
        self.db
            .put_cf(self.cf(CF_MANIFESTS)?, key, v)
            .map_err(|e| self.err(e))
    }

    /// A cached object's bytes, if cached with this tag.
    pub fn cached_object(&self, key: &str, tag: &str) -> Result<Option<Vec<u8>>> {
        let Some(v) = self
            .db
            .get_pinned_cf(self.cf(CF_MANIFESTS)?, key)
            .map_err(|e| self.err(e))?
        else {
            return Ok(None);
        };
        Ok(values::untagged(&v, tag).map(<[u8]>::to_vec))
    }
}
