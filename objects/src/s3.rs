//! The S3 object store (aws-sdk-s3 on a small tokio runtime), for AWS S3 and S3-compatible
//! servers (MinIO, Ceph RGW, Garage).
//!
//! * Location: `s3://bucket/prefix`; every key of `docs/format/bucket.md` lives under `prefix/`.
//! * Endpoint, region and path-style addressing come from [`S3Options`]; credentials from
//!   the standard AWS chain (environment, profile, web identity, container and instance
//!   metadata). TLS uses rustls with the system roots plus, when `AWS_CA_BUNDLE` names a
//!   PEM file, the certificates in it. There is no way to turn certificate checks off.
//! * Puts are atomic: a single PUT, or for objects over [`MULTIPART_THRESHOLD`] a multipart
//!   upload that is invisible until completed (and aborted on failure). Nothing depends on
//!   conditional PUT headers (Garage ignores them).
//! * Time: `list` and `stat` report `Last-Modified`; [`ObjectStore::now`] is the `Date`
//!   header of a one-key LIST (captured by a per-request interceptor, [`DateCapture`]),
//!   so lock ages compare the server's clock with itself.
//! * The SDK's standard retry mode retries throttling, 5xx and timeouts with exponential
//!   backoff and jitter, [`MAX_ATTEMPTS`] attempts in all.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::Region;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::{ByteStream, DateTime, DateTimeFormat};
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use aws_sdk_s3::Client;
use parking_lot::Mutex;

use crate::error::{ObjectError, Result};
use crate::store::{check_key, ObjectMeta, ObjectStore, Temporary};

/// Objects larger than this are uploaded in parts.
pub const MULTIPART_THRESHOLD: usize = 16 * 1024 * 1024;
/// Most bytes reserved up front for a GET's body from its `Content-Length` (larger bodies
/// grow the buffer as they arrive).
const MAX_PREALLOCATION: usize = 64 * 1024 * 1024;
/// Concurrent PUTs of [`ObjectStore::put_many`] (small objects: manifests, refs).
pub const PUTS_AT_ONCE: usize = 16;
/// Part size of multipart uploads (S3 needs at least 5 MiB).
pub const PART_SIZE: usize = 8 * 1024 * 1024;
/// Attempts per request, retries included.
pub const MAX_ATTEMPTS: u32 = 6;

/// How to reach the bucket.
#[derive(Clone, Debug, Default)]
pub struct S3Options {
    /// `--endpoint-url` (e.g. `http://127.0.0.1:3900`); AWS when absent.
    pub endpoint: Option<String>,
    /// Region; default from the environment or profile, else `us-east-1`.
    pub region: Option<String>,
    /// Path-style addressing (`endpoint/bucket/key`); default: on when an endpoint is given.
    pub path_style: Option<bool>,
}

/// A bucket (and prefix) as an object store.
pub struct S3Store {
    client: Client,
    rt: tokio::runtime::Runtime,
    bucket: String,
    prefix: String,
    location: String,
}

/// Counts SDK operations and attempts, so that retries show up in the metrics
/// (`modelcas_backend_retries_total`).
#[derive(Debug)]
struct AttemptCounter;

impl aws_sdk_s3::config::Intercept for AttemptCounter {
    fn name(&self) -> &'static str {
        "modelcas-attempt-counter"
    }

    fn read_before_execution(
        &self,
        _ctx: &aws_sdk_s3::config::interceptors::BeforeSerializationInterceptorContextRef<'_>,
        _cfg: &mut aws_sdk_s3::config::ConfigBag,
    ) -> std::result::Result<(), aws_sdk_s3::error::BoxError> {
        crate::requests::S3_REQUESTS
            .operations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    fn read_before_attempt(
        &self,
        _ctx: &aws_sdk_s3::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _rc: &aws_sdk_s3::config::RuntimeComponents,
        _cfg: &mut aws_sdk_s3::config::ConfigBag,
    ) -> std::result::Result<(), aws_sdk_s3::error::BoxError> {
        crate::requests::S3_REQUESTS
            .attempts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

/// Records the `Date` header of the response to one request: the server's clock.
#[derive(Debug, Clone, Default)]
struct DateCapture(Arc<Mutex<Option<SystemTime>>>);

impl aws_sdk_s3::config::Intercept for DateCapture {
    fn name(&self) -> &'static str {
        "modelcas-date-capture"
    }

    fn read_before_deserialization(
        &self,
        ctx: &aws_sdk_s3::config::interceptors::BeforeDeserializationInterceptorContextRef<'_>,
        _rc: &aws_sdk_s3::config::RuntimeComponents,
        _cfg: &mut aws_sdk_s3::config::ConfigBag,
    ) -> std::result::Result<(), aws_sdk_s3::error::BoxError> {
        let date = ctx
            .response()
            .headers()
            .get("date")
            .and_then(|d| DateTime::from_str(d, DateTimeFormat::HttpDate).ok())
            .and_then(|d| SystemTime::try_from(d).ok());
        if let Some(d) = date {
            *self.0.lock() = Some(d);
        }
        Ok(())
    }
}

fn system_time(t: Option<&DateTime>) -> Option<SystemTime> {
    t.and_then(|t| SystemTime::try_from(*t).ok())
}

/// The outcome of one spawned PUT of `put_many`; a task that panicked is an error too.
fn join_put(
    done: Option<std::result::Result<Result<()>, tokio::task::JoinError>>,
) -> Option<Result<()>> {
    Some(match done? {
        Ok(r) => r,
        Err(e) => Err(backend_err("put", "(batch)", e.to_string())),
    })
}

fn backend_err(op: &'static str, key: &str, reason: impl Into<String>) -> ObjectError {
    ObjectError::Backend {
        op,
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// A readable reason for an SDK error, naming access-denied errors as such.
fn describe<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug>(
    e: &SdkError<E, R>,
) -> String {
    match e {
        SdkError::ServiceError(se) => {
            let err = se.err();
            match err.code() {
                Some("AccessDenied") | Some("Forbidden") => format!(
                    "access denied ({}): these credentials may not allow this (read-only credentials cannot write)",
                    err.message().unwrap_or("no message")
                ),
                Some(code) => format!("{code}: {}", err.message().unwrap_or("no message")),
                None => format!("{err}"),
            }
        }
        SdkError::DispatchFailure(d) => {
            let mut msg = String::from("cannot reach the S3 endpoint");
            let mut src: Option<&dyn std::error::Error> = std::error::Error::source(e);
            while let Some(s) = src {
                msg = format!("{msg}: {s}");
                src = s.source();
            }
            if d.is_timeout() {
                msg.push_str(" (timed out)");
            }
            msg
        }
        SdkError::TimeoutError(_) => "timed out".to_string(),
        other => format!("{other}"),
    }
}

fn is_not_found<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    match e {
        SdkError::ServiceError(se) => {
            matches!(
                se.err().code(),
                Some("NoSuchKey") | Some("NotFound") | Some("404")
            )
        }
        _ => false,
    }
}

impl S3Store {
    /// Connects to `url` (`s3://bucket/prefix`). Loading credentials happens here; requests
    /// happen on use.
    pub fn new(url: &str, opts: &S3Options) -> Result<S3Store> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| ObjectError::Invalid(format!("not an s3:// URL: {url:?}")))?;
        let (bucket, prefix) = match rest.split_once('/') {
            Some((b, p)) => (b.to_string(), p.trim_matches('/').to_string()),
            None => (rest.to_string(), String::new()),
        };
        if bucket.is_empty() {
            return Err(ObjectError::Invalid(format!("{url:?} names no bucket")));
        }
        if !prefix.is_empty() {
            check_key(&prefix)
                .map_err(|_| ObjectError::Invalid(format!("invalid prefix in {url:?}")))?;
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("modelcas-s3")
            .enable_all()
            .build()
            .map_err(|e| ObjectError::Invalid(format!("cannot start the S3 runtime: {e}")))?;
        let http = http_client(opts.endpoint.as_deref())?;
        let mut loader =
            aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(http);
        if let Some(ep) = &opts.endpoint {
            loader = loader.endpoint_url(ep);
        }
        if let Some(r) = &opts.region {
            loader = loader.region(Region::new(r.clone()));
        }
        let sdk = rt.block_on(loader.load());
        let mut conf = aws_sdk_s3::config::Builder::from(&sdk)
            .retry_config(RetryConfig::standard().with_max_attempts(MAX_ATTEMPTS))
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(5))
                    .read_timeout(Duration::from_secs(60))
                    .operation_attempt_timeout(Duration::from_secs(300))
                    .build(),
            )
            .force_path_style(opts.path_style.unwrap_or(opts.endpoint.is_some()));
        if sdk.region().is_none() {
            conf = conf.region(Region::new("us-east-1"));
        }
        let conf = conf.interceptor(AttemptCounter);
        let client = Client::from_conf(conf.build());
        Ok(S3Store {
            client,
            rt,
            bucket,
            prefix,
            location: url.trim_end_matches('/').to_string(),
        })
    }

    fn full_key(&self, key: &str) -> Result<String> {
        check_key(key)?;
        Ok(if self.prefix.is_empty() {
            key.to_string()
        } else {
            format!("{}/{key}", self.prefix)
        })
    }

    async fn put_multipart(&self, full: &str, key: &str, data: &[u8]) -> Result<()> {
        let create = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(full)
            .send()
            .await
            .map_err(|e| backend_err("put", key, describe(&e)))?;
        let upload_id = create.upload_id().unwrap_or_default().to_string();
        let parts = async {
            // Up to 4 parts in flight: bounded memory and bandwidth per upload.
            let mut done = Vec::new();
            for (batch_no, batch) in data.chunks(PART_SIZE * 4).enumerate() {
                let mut set = tokio::task::JoinSet::new();
                for (i, part) in batch.chunks(PART_SIZE).enumerate() {
                    let number = (batch_no * 4 + i + 1) as i32;
                    let req = self
                        .client
                        .upload_part()
                        .bucket(&self.bucket)
                        .key(full)
                        .upload_id(&upload_id)
                        .part_number(number)
                        .body(ByteStream::from(part.to_vec()));
                    set.spawn(async move {
                        req.send()
                            .await
                            .map(|o| (number, o.e_tag().map(str::to_string)))
                    });
                }
                while let Some(joined) = set.join_next().await {
                    let sent = joined.map_err(|e| backend_err("put", key, e.to_string()))?;
                    let (number, etag) = sent.map_err(|e| backend_err("put", key, describe(&e)))?;
                    done.push(
                        CompletedPart::builder()
                            .part_number(number)
                            .set_e_tag(etag)
                            .build(),
                    );
                }
            }
            done.sort_by_key(|p| p.part_number());
            Ok::<_, ObjectError>(done)
        }
        .await;
        let result = match parts {
            Ok(parts) => self
                .client
                .complete_multipart_upload()
                .bucket(&self.bucket)
                .key(full)
                .upload_id(&upload_id)
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(parts))
                        .build(),
                )
                .send()
                .await
                .map(|_| ())
                .map_err(|e| backend_err("put", key, describe(&e))),
            Err(e) => Err(e),
        };
        if result.is_err() {
            let _ = self
                .client
                .abort_multipart_upload()
                .bucket(&self.bucket)
                .key(full)
                .upload_id(&upload_id)
                .send()
                .await;
        }
        result
    }
}

impl S3Store {
    /// GET of a whole object, or of `len` bytes from `offset` (a range starting past the end
    /// of the object gives an empty result, which `get_range` reports as truncation).
    fn get_object(&self, key: &str, range: Option<(u64, u64)>) -> Result<Vec<u8>> {
        let full = self.full_key(key)?;
        self.rt.block_on(async {
            let mut req = self.client.get_object().bucket(&self.bucket).key(&full);
            if let Some((offset, len)) = range {
                req = req.range(format!("bytes={}-{}", offset, offset + len - 1));
            }
            let out = match req.send().await {
                Ok(o) => o,
                Err(e) if is_not_found(&e) => return Err(ObjectError::NotFound(key.to_string())),
                Err(SdkError::ServiceError(se)) if se.err().code() == Some("InvalidRange") => {
                    return Ok(Vec::new())
                }
                Err(e) => return Err(backend_err("get", key, describe(&e))),
            };
            // The body's pieces go straight into one buffer of the announced length (capped:
            // a length is the server's word), not collected, joined and copied again: two
            // copies fewer of every byte a mount reads from S3.
            let announced = out.content_length().and_then(|n| usize::try_from(n).ok());
            let cap = match range {
                Some((_, len)) => usize::try_from(len).unwrap_or(usize::MAX),
                None => MAX_PREALLOCATION,
            };
            let mut bytes =
                Vec::with_capacity(announced.unwrap_or(0).min(cap).min(MAX_PREALLOCATION));
            let mut body = out.body;
            while let Some(piece) = body.next().await {
                let piece = piece.map_err(|e| backend_err("get", key, e.to_string()))?;
                bytes.extend_from_slice(&piece);
            }
            if let Some((_, len)) = range {
                bytes.truncate(len as usize);
            }
            Ok(bytes)
        })
    }
}

/// An HTTPS-capable client (plain http works too) trusting the system roots and the
/// certificates of `AWS_CA_BUNDLE` when it names a file.
fn http_client(endpoint: Option<&str>) -> Result<aws_sdk_s3::config::SharedHttpClient> {
    use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode, TlsContext, TrustStore};
    let mut trust = TrustStore::default();
    if let Some(path) = std::env::var_os("AWS_CA_BUNDLE").filter(|p| !p.is_empty()) {
        match std::fs::read(&path) {
            Ok(pem) => trust = trust.with_pem_certificate(pem),
            // A plain-http endpoint needs no CA; anything else must not silently drop it.
            Err(e) if !endpoint.is_some_and(|ep| ep.starts_with("http://")) => {
                return Err(ObjectError::Invalid(format!(
                    "AWS_CA_BUNDLE={}: {e}",
                    std::path::Path::new(&path).display()
                )))
            }
            Err(_) => {}
        }
    }
    let ctx = TlsContext::builder()
        .with_trust_store(trust)
        .build()
        .map_err(|e| ObjectError::Invalid(format!("TLS setup: {e}")))?;
    Ok(aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .tls_context(ctx)
        .build_https())
}

impl ObjectStore for S3Store {
    fn put(&self, key: &str, data: &[u8]) -> Result<()> {
        let full = self.full_key(key)?;
        self.rt.block_on(async {
            if data.len() > MULTIPART_THRESHOLD {
                return self.put_multipart(&full, key, data).await;
            }
            self.client
                .put_object()
                .bucket(&self.bucket)
                .key(&full)
                .body(ByteStream::from(data.to_vec()))
                .send()
                .await
                .map(|_| ())
                .map_err(|e| backend_err("put", key, describe(&e)))
        })
    }

    /// The PUTs go out concurrently, at most [`PUTS_AT_ONCE`] at a time; objects over
    /// [`MULTIPART_THRESHOLD`] go one after the other as [`ObjectStore::put`] sends them.
    fn put_many(&self, objects: &[(String, Vec<u8>)]) -> Result<()> {
        // Every key checked before anything is sent.
        for (key, _) in objects {
            self.full_key(key)?;
        }
        let (small, large): (Vec<_>, Vec<_>) = objects
            .iter()
            .partition(|(_, data)| data.len() <= MULTIPART_THRESHOLD);
        for (key, data) in large {
            self.put(key, data)?;
        }
        let mut jobs = Vec::with_capacity(small.len());
        for (key, data) in small {
            jobs.push((key.clone(), self.full_key(key)?, data.clone()));
        }
        self.rt.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            let mut first_error = None;
            for (key, full, data) in jobs {
                if set.len() >= PUTS_AT_ONCE {
                    if let Some(Err(e)) = join_put(set.join_next().await) {
                        first_error.get_or_insert(e);
                    }
                }
                let put = self
                    .client
                    .put_object()
                    .bucket(&self.bucket)
                    .key(full)
                    .body(ByteStream::from(data));
                set.spawn(async move {
                    put.send()
                        .await
                        .map(|_| ())
                        .map_err(|e| backend_err("put", &key, describe(&e)))
                });
            }
            while let Some(done) = set.join_next().await {
                if let Some(Err(e)) = join_put(Some(done)) {
                    first_error.get_or_insert(e);
                }
            }
            first_error.map_or(Ok(()), Err)
        })
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        self.get_object(key, None)
    }

    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        if len == 0 {
            return Ok(Vec::new());
        }
        let bytes = self.get_object(key, Some((offset, len)))?;
        if (bytes.len() as u64) < len {
            return Err(ObjectError::CorruptObject {
                key: key.to_string(),
                reason: format!(
                    "truncated: wanted {len} bytes at offset {offset}, got {}",
                    bytes.len()
                ),
            });
        }
        Ok(bytes)
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let full_prefix = if self.prefix.is_empty() {
            prefix.to_string()
        } else {
            format!("{}/{prefix}", self.prefix)
        };
        let strip = if self.prefix.is_empty() {
            0
        } else {
            self.prefix.len() + 1
        };
        self.rt.block_on(async {
            let mut out = Vec::new();
            let mut pages = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(&full_prefix)
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| backend_err("list", prefix, describe(&e)))?;
                for o in page.contents() {
                    if let Some(k) = o.key() {
                        if k.len() >= strip {
                            out.push(ObjectMeta {
                                key: k[strip..].to_string(),
                                size: o.size().unwrap_or(0).max(0) as u64,
                                tag: o.e_tag().unwrap_or_default().to_string(),
                                modified: system_time(o.last_modified()),
                            });
                        }
                    }
                }
            }
            out.sort_by(|a, b| a.key.cmp(&b.key));
            Ok(out)
        })
    }

    fn temporaries(&self, min_age: Duration) -> Result<Vec<Temporary>> {
        let strip = if self.prefix.is_empty() {
            0
        } else {
            self.prefix.len() + 1
        };
        // `initiated` is the server's clock: compare it with the server's.
        let now = self
            .now()?
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        self.rt.block_on(async {
            let mut out = Vec::new();
            let (mut key_marker, mut id_marker) = (None::<String>, None::<String>);
            loop {
                let mut req = self.client.list_multipart_uploads().bucket(&self.bucket);
                if !self.prefix.is_empty() {
                    req = req.prefix(format!("{}/", self.prefix));
                }
                if let Some(k) = &key_marker {
                    req = req.key_marker(k);
                }
                if let Some(i) = &id_marker {
                    req = req.upload_id_marker(i);
                }
                let page = req
                    .send()
                    .await
                    .map_err(|e| backend_err("list uploads", "", describe(&e)))?;
                for u in page.uploads() {
                    let (Some(k), Some(id)) = (u.key(), u.upload_id()) else {
                        continue;
                    };
                    let started = u.initiated().map(|t| t.secs()).unwrap_or(now);
                    let age = (now - started).max(0) as u64;
                    if age >= min_age.as_secs() && k.len() >= strip {
                        out.push(Temporary {
                            name: format!("upload {} {id}", &k[strip..]),
                            age_secs: age,
                            handle: id.to_string(),
                            key: Some(k[strip..].to_string()),
                        });
                    }
                }
                if page.is_truncated() != Some(true) {
                    break;
                }
                key_marker = page.next_key_marker().map(str::to_string);
                id_marker = page.next_upload_id_marker().map(str::to_string);
                if key_marker.is_none() {
                    break;
                }
            }
            Ok(out)
        })
    }

    fn remove_temporary(&self, t: &Temporary) -> Result<()> {
        let Some(key) = &t.key else {
            return Ok(());
        };
        let full = self.full_key(key)?;
        self.rt.block_on(async {
            self.client
                .abort_multipart_upload()
                .bucket(&self.bucket)
                .key(&full)
                .upload_id(&t.handle)
                .send()
                .await
                .map_err(|e| backend_err("abort upload", key, describe(&e)))?;
            Ok(())
        })
    }

    fn delete(&self, key: &str) -> Result<()> {
        let full = self.full_key(key)?;
        self.rt.block_on(async {
            self.client
                .delete_object()
                .bucket(&self.bucket)
                .key(&full)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| backend_err("delete", key, describe(&e)))
        })
    }

    fn size(&self, key: &str) -> Result<Option<u64>> {
        Ok(self.stat(key)?.map(|m| m.size))
    }

    fn stat(&self, key: &str) -> Result<Option<ObjectMeta>> {
        let full = self.full_key(key)?;
        self.rt.block_on(async {
            match self
                .client
                .head_object()
                .bucket(&self.bucket)
                .key(&full)
                .send()
                .await
            {
                Ok(o) => Ok(Some(ObjectMeta {
                    key: key.to_string(),
                    size: o.content_length().unwrap_or(0).max(0) as u64,
                    tag: o.e_tag().unwrap_or_default().to_string(),
                    modified: system_time(o.last_modified()),
                })),
                Err(SdkError::ServiceError(se)) if se.raw().status().as_u16() == 404 => Ok(None),
                Err(e) if is_not_found(&e) => Ok(None),
                Err(e) => Err(backend_err("head", key, describe(&e))),
            }
        })
    }

    fn now(&self) -> Result<SystemTime> {
        let capture = DateCapture::default();
        let prefix = if self.prefix.is_empty() {
            format::layout::LOCKS_PREFIX.to_string()
        } else {
            format!("{}/{}", self.prefix, format::layout::LOCKS_PREFIX)
        };
        self.rt.block_on(async {
            self.client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(&prefix)
                .max_keys(1)
                .customize()
                .interceptor(capture.clone())
                .send()
                .await
                .map_err(|e| backend_err("list", &prefix, describe(&e)))
        })?;
        let date = *capture.0.lock();
        date.ok_or_else(|| {
            backend_err(
                "list",
                &prefix,
                "the response has no Date header: cannot read the server's clock",
            )
        })
    }

    fn location(&self) -> String {
        self.location.clone()
    }
}
