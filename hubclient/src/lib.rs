//! A blocking client of the Hugging Face Hub HTTP API, for any HF-compatible endpoint:
//! the public Hub, a mirror, or `modelcas serve`. It is the network half of
//! `modelcas pull` and knows nothing of the store.
//!
//! - [`HubClient::revision`]: a branch, tag or sha → its commit and every file in it,
//!   each with the hashes the Hub states ([`RemoteFile`]), all of it checked as hostile
//!   input (paths, hex fields, sizes, counts).
//! - [`HubClient::open`]: one file's bytes as a [`Download`] (`std::io::Read`) that
//!   resumes by itself when a connection is cut, and never ends short or long.
//! - [`Verifier`] and [`RemoteFile::check`]: the streamed bytes against the Hub's sha256
//!   (LFS files) or git blob id (other files).
//!
//! Requests are retried on 429, 5xx and connection failures, with exponential backoff
//! and jitter, honouring `Retry-After`. The token goes to the endpoint's origin only;
//! redirects are followed to that origin and to configured hosts only
//! ([`HubOptions::redirect_hosts`]). Every transfer has a total deadline ([`Timeouts`]),
//! and a file listing is held to caps ([`ListingLimits`]).
//! [`HubClient::stats`] counts requests, retries and bytes for progress and reports.
//!
//! ```no_run
//! use std::io::Read;
//! use hubclient::{HubClient, HubOptions, Verifier, Verifying};
//!
//! let client = HubClient::new(HubOptions::from_env(None, None))?;
//! let rev = client.revision("org/model", "main")?;
//! for f in &rev.files {
//!     let d = client.open_file("org/model", &rev.commit, f, 0)?;
//!     let mut r = Verifying::new(d, Verifier::for_file(f));
//!     std::io::copy(&mut r, &mut std::io::sink())?;
//!     f.check(&r.finish().0)?;
//! }
//! # Ok::<(), hubclient::Error>(())
//! ```

mod client;
mod download;
mod error;
mod options;
mod retry;
mod revision;
pub mod url;
mod verify;

pub use client::{HubClient, Stats};
pub use download::{Download, MAX_RESUMES};
pub use error::Error;
pub use options::{endpoint, token, HubOptions, ListingLimits, Timeouts, DEFAULT_ENDPOINT};
pub use revision::{RemoteFile, Revision, MAX_JSON_BODY, MAX_PAGES};
pub use verify::{Digests, Verifier, Verifying};
