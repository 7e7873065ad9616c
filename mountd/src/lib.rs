//! The node's mount holder (`modelcas mountd`, and `modelcas mount` for its one mount):
//! what keeps a FUSE mount alive while the processes that answer it die, restart or are
//! upgraded.
//!
//! * [`holder`]: keeps every connection's `/dev/fuse` descriptor and takeover state
//!   (`modelfs::takeover`), runs the one server process, starts another at once when it
//!   ends, and hands everything to a new holder on an upgrade of the holder itself;
//! * [`server`]: the server process's loop (what it serves with is the caller's);
//! * [`socket`]: the holder's unix socket for its clients (the CSI plugin, a new mountd);
//! * [`wire`]: the frames between them (JSON with descriptors attached);
//! * [`metrics`]: volumes served, takeovers and their pause.
//!
//! The protocol's invariant (docs/FORMAT.md, "Mount takeover"): one server per connection
//! at a time, and every descriptor of a mounted connection held by the holder from the
//! moment the mount exists until it is unmounted.

pub mod holder;
pub mod metrics;
pub mod server;
pub mod socket;
pub mod wire;
