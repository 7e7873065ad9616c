//! The CSI v1 node plugin's gRPC layer: the Identity and Node services on a unix socket,
//! over a `VolumeBackend` that the binary implements. No storage or mount code lives here.
//!
//! - `proto`: the bindings generated at build time from the vendored `proto/csi.proto`
//!   (v1.12.0; `proto/README.md`), servers and transport-generic clients;
//! - `backend`: `Volume`, `Published`, `VolumeError` and the `VolumeBackend` trait;
//! - `validate`: the checks of a publish request (field by field, with what to write
//!   instead);
//! - `identity`, `node`: the two services; `node` owns idempotency, the per-target lock
//!   (`locks`) and the mapping of backend errors to gRPC codes;
//! - `server`: the endpoint and `serve`.
//!
//! docs/design/csi-and-takeover.md (§2, §3) says why each choice was made, from what
//! kubelet sends.

mod backend;
mod identity;
mod locks;
mod node;
mod server;
mod validate;

pub use backend::{PodInfo, Published, Volume, VolumeBackend, VolumeError};
pub use identity::{DRIVER_NAME, VENDOR_VERSION};
pub use server::{parse_endpoint, serve, CsiError};
pub use validate::{DEFAULT_REVISION, KEY_REPO, KEY_REVISION, POD_INFO_PREFIX};

/// The CSI v1 messages, servers and clients, generated from `proto/csi.proto` (package
/// `csi.v1`). The clients are generic over the transport (no `connect`).
#[allow(
    unused_qualifications,
    clippy::allow_attributes_without_reason,
    reason = "generated code (spelling paths in full, with allows of its own): not edited"
)]
pub mod proto {
    tonic::include_proto!("csi.v1");
}
