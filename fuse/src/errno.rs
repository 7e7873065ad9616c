//! Store errors as the errno the mount answers: `EIO`, counted in the mount's read errors
//! and logged.

use fuser::Errno;

/// `EIO` for a store error, counted and logged.
pub(crate) fn eio(e: repo::StoreError) -> Errno {
    repo::metrics::add(&repo::metrics::METRICS.mount_read_errors, 1);
    tracing::error!("mount: {e}");
    Errno::EIO
}
