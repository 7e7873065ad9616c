//! Command-line arguments (clap derive). Plain values only (durations parsed as gc parses
//! them); `cmd/` turns them into store objects.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use store::gc::retention::{parse_duration, Policy};
use store::gc::GcFlags;

/// A deduplicating store for model weights.
#[derive(Parser, Debug)]
#[command(name = "modelcas", version, about, long_about = None)]
pub struct Cli {
    /// The store: a directory (default: the user's data directory, ~/.local/share/modelcas/store),
    /// an S3 bucket, s3://BUCKET/PREFIX, or hubs for reading, http://HUB:PORT[,http://HUB2:PORT].
    #[arg(
        long,
        global = true,
        env = "MODELCAS_STORE",
        value_name = "PATH|s3://BUCKET/PREFIX|http://HUB:PORT"
    )]
    pub store: Option<String>,
    /// S3 endpoint for S3-compatible servers (MinIO, Ceph RGW, Garage), e.g. http://127.0.0.1:3900.
    #[arg(long, global = true, env = "MODELCAS_ENDPOINT_URL", value_name = "URL")]
    pub endpoint_url: Option<String>,
    /// S3 region (default: AWS_REGION or the profile's, else us-east-1).
    #[arg(long, global = true, env = "MODELCAS_REGION")]
    pub region: Option<String>,
    /// Path-style S3 addressing (default: on with --endpoint-url, off for AWS).
    #[arg(long, global = true, env = "MODELCAS_PATH_STYLE", value_name = "BOOL")]
    pub path_style: Option<bool>,
    /// Directory of the local RocksDB index (default: ~/.cache/modelcas/index/<store id>).
    #[arg(long, global = true, env = "MODELCAS_INDEX", value_name = "DIR")]
    pub index_dir: Option<PathBuf>,
    /// Node-local chunk cache for reads from an S3 store (default ~/.cache/modelcas/chunks/<store id>).
    #[arg(long, global = true, env = "MODELCAS_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Size limit of the chunk cache (e.g. 20G, 512M; default 10G).
    #[arg(long, global = true, env = "MODELCAS_CACHE_SIZE", value_name = "SIZE")]
    pub cache_size: Option<String>,
    /// The token sent to a hub store (--store http://HUB:PORT), from this file (first line;
    /// read again after a 401, so a rotated secret is picked up); default: HF_TOKEN.
    #[arg(
        long,
        global = true,
        env = "MODELCAS_HUB_TOKEN_FILE",
        value_name = "FILE"
    )]
    pub hub_token_file: Option<PathBuf>,
    /// How long a read through hubs goes round their addresses before it fails (default 60s).
    #[arg(
        long,
        global = true,
        env = "MODELCAS_HUB_RETRY_FOR",
        value_name = "DURATION"
    )]
    pub hub_retry_for: Option<String>,
    /// Config file (TOML); default /etc/modelcas/config.toml when it exists.
    #[arg(long, global = true, env = "MODELCAS_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log level: error, warn, info, debug, trace (default: RUST_LOG, else info).
    #[arg(long, global = true, env = "MODELCAS_LOG_LEVEL", value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Log format: text (default) or json (one object per line).
    #[arg(
        long,
        global = true,
        env = "MODELCAS_LOG_FORMAT",
        value_name = "FORMAT"
    )]
    pub log_format: Option<String>,
    /// Serve Prometheus metrics on http://ADDR/metrics while the command runs.
    #[arg(
        long,
        global = true,
        env = "MODELCAS_METRICS_LISTEN",
        value_name = "ADDR"
    )]
    pub metrics_listen: Option<String>,
    /// Write Prometheus metrics to FILE when the command ends (node_exporter textfile collector).
    #[arg(
        long,
        global = true,
        env = "MODELCAS_METRICS_FILE",
        value_name = "FILE"
    )]
    pub metrics_file: Option<PathBuf>,
    /// No progress bars.
    #[arg(long, short, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a store with chosen chunking parameters (ingest creates one with the defaults).
    Init {
        /// Average chunk size in bytes (min = avg/4, max = avg*4); default 512 KiB.
        #[arg(long, default_value_t = 512 * 1024)]
        chunk_avg: u32,
        /// Pack size target in bytes; default 32 MiB.
        #[arg(long, default_value_t = 32 * 1024 * 1024)]
        pack_size: u32,
    },
    /// Ingest a snapshot directory, a Hugging Face cache repo (models--org--name) or a whole hub cache.
    Ingest {
        /// The directory to ingest.
        path: PathBuf,
        /// Repository id ORG/NAME (required for a plain directory).
        #[arg(long)]
        repo: Option<String>,
        /// The commit sha (40 hex) of a plain directory; default: read from
        /// .cache/huggingface/download, else derived from the content.
        #[arg(long)]
        revision: Option<String>,
        /// Point this ref (branch or tag) at the ingested commit; repeatable.
        #[arg(long = "ref", value_name = "NAME")]
        refs: Vec<String>,
        /// Threads for reading and for compressing (each); default: the number of CPUs
        /// compressing, and as many reading but at least 4 (reads wait on the disk) and at
        /// most 8 (each reader fills a pack of its own in memory).
        #[arg(long)]
        threads: Option<usize>,
        /// Read every file, even those this machine's index knows unchanged since an
        /// earlier ingest read them (on ext4, xfs or btrfs: same device, inode, size, mtime
        /// and ctime, in the same boot and mount, the file still for 2 s before that read,
        /// every chunk still stored); those are otherwise taken from the index without
        /// reading them. Also computes every file's Xet hash instead of reusing the one
        /// recorded for the same content.
        #[arg(long)]
        reread: bool,
        /// Set a release label on every ingested revision: KEY=VALUE (e.g. vllm=0.11.0,
        /// validated-by=ci); repeatable.
        #[arg(long = "label", value_name = "KEY=VALUE")]
        labels: Vec<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check that a revision would load in vLLM and transformers (config.json, every
    /// .safetensors header, the shard index, a tokenizer, custom code, a chat template) and
    /// record the result with it. Exit 0 passed (or warnings only), 1 failed, 2 not checked.
    Check {
        /// ORG/NAME@REV, or a snapshot directory (checked before ingest; nothing recorded);
        /// with --all, ORG/NAME (default: every repository).
        #[arg(required_unless_present = "all")]
        target: Option<String>,
        /// Check every stored revision (of ORG/NAME, or of every repository) that has no
        /// current record (none, another files' or older rules'), and record the results:
        /// the way to check revisions stored before the check existed.
        #[arg(long)]
        all: bool,
        /// With --all: check every revision again, even one with a current record.
        #[arg(long, requires = "all")]
        recheck: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Do not record the result in the store.
        #[arg(long)]
        no_record: bool,
    },
    /// Set, remove or list the release labels of a revision (KEY=VALUE, e.g. vllm=0.11.0).
    Label {
        /// ORG/NAME@REV.
        revision: String,
        /// Labels to set (replacing a key's value): KEY=VALUE.
        #[arg(value_name = "KEY=VALUE")]
        labels: Vec<String>,
        /// Remove this label; repeatable.
        #[arg(long = "remove", value_name = "KEY")]
        remove: Vec<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List repositories; the commits and refs of ORG/NAME; the files of ORG/NAME@REV.
    Ls {
        /// ORG/NAME or ORG/NAME@REV.
        target: Option<String>,
        /// Print JSON.
        #[arg(long, conflicts_with = "sha256sum")]
        json: bool,
        /// With ORG/NAME@REV: print the files as `sha256sum` lines (`HASH  PATH`), which
        /// `sha256sum -c` checks in a checkout of that revision.
        #[arg(long)]
        sha256sum: bool,
    },
    /// Write the files of a revision into DIR (plain files, checked against their sha256).
    Checkout {
        /// ORG/NAME@REV (REV: ref name, full sha, or a unique prefix of at least 7 hex digits).
        revision: String,
        /// Target directory: must not exist or be empty.
        dir: PathBuf,
    },
    /// Write one file of a revision to standard output.
    Cat {
        /// ORG/NAME@REV.
        revision: String,
        /// Path of the file in the revision.
        path: String,
    },
    /// Re-read every file of a revision through the store and check chunk hashes, sha256 and
    /// the recorded Xet hashes.
    Verify {
        /// ORG/NAME@REV.
        revision: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Logical bytes, stored bytes, dedup and compression ratios.
    Stats {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Mount the store as read-only directories: MOUNTPOINT/<org>/<name>/<rev>/... (foreground).
    Mount(MountArgs),
    /// The node's mount daemon for CSI volumes: keeps every volume's FUSE connection and
    /// runs the server that answers them, restarted (SIGHUP: from the binary on disk)
    /// without unmounting anything.
    Mountd(MountdArgs),
    /// The CSI node plugin (Kubernetes): publishes read-only volumes of one revision,
    /// kept by `modelcas mountd`.
    Csi(CsiArgs),
    /// Unmount a modelcas mount.
    Umount {
        /// The mountpoint.
        mountpoint: PathBuf,
    },
    /// Expire old revisions and reclaim the space no kept revision uses (safe beside
    /// running ingests and mounts). Exit status: 0 done, 1 failed, 3 another gc holds the lock.
    Gc(GcArgs),
    /// Delete a ref (ORG/NAME@REF), or a revision (ORG/NAME@SHA) whose data gc then reclaims.
    Rm {
        /// ORG/NAME@REV.
        revision: String,
        /// Also remove the refs that point at the commit and its pin.
        #[arg(long)]
        force: bool,
    },
    /// Point a ref (branch or tag) at a revision: upgrade or roll back what
    /// /models/ORG/NAME/REF shows (`modelcas ref org/name main 0a1b2c3`).
    Ref {
        /// ORG/NAME.
        repo: String,
        /// The ref to set (created if needed).
        name: String,
        /// The revision: a commit sha or prefix, or another ref.
        revision: String,
    },
    /// Pin a revision: no retention policy expires it.
    Pin {
        /// ORG/NAME@REV.
        revision: String,
    },
    /// Remove a pin.
    Unpin {
        /// ORG/NAME@REV.
        revision: String,
    },
    /// Check that the whole store is consistent. Exit status 1 when a problem is found.
    Fsck {
        /// Also read every pack and check every chunk's hash.
        #[arg(long)]
        read_data: bool,
        /// Leftover temporaries older than this are problems (default 24h).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        grace: Option<Duration>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write revisions (manifests, refs, and the chunks the other side lacks) into one
    /// bundle file for a closed network.
    Export {
        /// ORG/NAME@REV, one or more; a ref name also sets that ref on import.
        #[arg(required = true)]
        revisions: Vec<String>,
        /// The bundle file; `-` for standard output.
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        /// A revision the other side already has (its chunks are left out); repeatable.
        #[arg(long, value_name = "ORG/NAME@REV")]
        have: Vec<String>,
        /// What the other side has, as `modelcas ls --json` (or `ls ORG/NAME --json`) prints it there.
        #[arg(long, value_name = "FILE")]
        have_from: Option<PathBuf>,
        /// Leave the revisions' release labels out (importers before labels refuse a bundle
        /// that carries them).
        #[arg(long)]
        no_labels: bool,
        /// Print the report as JSON (on standard error when the bundle goes to standard output).
        #[arg(long)]
        json: bool,
    },
    /// Download a revision from a Hugging Face-compatible Hub straight into the store (no
    /// local copy): every file checked against the Hub's sha256 / git blob id before the
    /// revision becomes visible; files already stored are not downloaded again.
    Pull(PullArgs),
    /// Pull every revision of a prefetch list (TOML, docs/OPERATIONS.md) that the store
    /// lacks and move refs to what the list says; exit status 1 when an entry failed.
    Sync(SyncArgs),
    /// Import a bundle: everything is checked (bundle checksum, every chunk, every file's
    /// sha256) before any revision becomes visible.
    Import {
        /// The bundle file; `-` for standard input.
        file: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Serve the store read-only over a Hugging Face Hub-compatible HTTP API (point
    /// HF_ENDPOINT at it); Prometheus metrics on /metrics.
    Serve(Box<ServeArgs>),
    /// Show the effective configuration (file, environment and flags merged; secrets masked).
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Manage the local index.
    Index {
        #[command(subcommand)]
        action: IndexAction,
    },
}

#[derive(Subcommand, Debug)]
pub enum ConfigAction {
    /// Print the effective configuration as TOML (a valid config file).
    Show,
}

#[derive(Subcommand, Debug)]
pub enum IndexAction {
    /// Recreate the index from the store alone.
    Rebuild,
}

/// `modelcas serve`'s connection limit and timeouts.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ServeLimitArgs {
    /// Connections served at once; more wait in the accept queue (default 1024).
    #[arg(long, env = "MODELCAS_SERVE_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,
    /// Time a client has to send a whole request head, and to start the next request on
    /// an idle kept-alive connection, before it is closed (default 30s).
    #[arg(long, env = "MODELCAS_SERVE_HEADER_TIMEOUT", value_name = "DURATION")]
    pub header_timeout: Option<String>,
    /// Time to produce a reply's head before answering 503 (default 5m).
    #[arg(long, env = "MODELCAS_SERVE_REQUEST_TIMEOUT", value_name = "DURATION")]
    pub request_timeout: Option<String>,
    /// Time a response may make no progress (a client that stopped reading) before the
    /// connection is closed (default 60s).
    #[arg(long, env = "MODELCAS_SERVE_WRITE_TIMEOUT", value_name = "DURATION")]
    pub write_timeout: Option<String>,
}

/// `modelcas mount`'s flags (each falls back to `[mount]` in the config file).
#[derive(clap::Args, Debug, Clone)]
pub struct MountArgs {
    /// Where to mount.
    pub mountpoint: PathBuf,
    /// Show one revision at the root instead (ORG/NAME@REV, resolved once at mount time).
    #[arg(long, value_name = "ORG/NAME@REV")]
    pub repo: Option<String>,
    #[command(flatten)]
    pub tuning: MountTuning,
}

/// How a FUSE server reads (`modelcas mount`, and `modelcas mountd` for every volume).
#[derive(clap::Args, Debug, Clone)]
pub struct MountTuning {
    /// Allow other users (pods running as another uid) to read the mount.
    #[arg(long, env = "MODELCAS_ALLOW_OTHER")]
    pub allow_other: bool,
    /// Memory for decoded chunks, in MiB (read-ahead uses up to half of it; default 64).
    #[arg(long, env = "MODELCAS_MOUNT_CACHE_MIB")]
    pub cache_mib: Option<usize>,
    /// Threads fetching, decompressing and verifying chunks (default 4, 16 for S3).
    #[arg(long, env = "MODELCAS_MOUNT_FETCH_THREADS")]
    pub fetch_threads: Option<usize>,
    /// FUSE worker threads (default 8).
    #[arg(long, env = "MODELCAS_MOUNT_THREADS")]
    pub threads: Option<usize>,
    /// Microseconds a FUSE worker that answered a request looks for the next one before
    /// it sleeps (one worker reads at a time, yielding to any other runnable thread; at
    /// most 1000; default 50, or 0 under a CPU quota; 0 turns it off). Saves a thread's
    /// wake-up per request in walks of small files.
    #[arg(long, env = "MODELCAS_MOUNT_SPIN_US", value_name = "US")]
    pub spin_us: Option<u64>,
    /// The order loaders are expected to read a `.safetensors` file's tensors in, for
    /// read-ahead: `name` (safe_open and vLLM; default), `file`, or `off` (sequential
    /// read-ahead only).
    #[arg(long, env = "MODELCAS_SAFETENSORS_ORDER", value_name = "ORDER")]
    pub safetensors_order: Option<String>,
    /// Where the node keeps whole, verified copies of the files read, for later opens
    /// (default: the user's cache directory, modelcas/files/<store id>).
    #[arg(long, env = "MODELCAS_FILE_CACHE", value_name = "DIR")]
    pub file_cache: Option<PathBuf>,
    /// Size limit of the file cache, least recently used files removed first (e.g. 50G;
    /// default 20G; 0 turns it off).
    #[arg(long, env = "MODELCAS_FILE_CACHE_SIZE", value_name = "SIZE")]
    pub file_cache_size: Option<String>,
    /// Never hand whole files to the kernel (FUSE passthrough); read them through the
    /// mount instead.
    #[arg(long, env = "MODELCAS_NO_PASSTHROUGH")]
    pub no_passthrough: bool,
}

/// `modelcas mountd`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct MountdArgs {
    /// The unix socket the CSI plugin and `modelcas mountd --take-over` talk to.
    #[arg(long, env = "MODELCAS_MOUNTD_SOCKET", default_value = mountd::socket::DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Take every volume over from the mountd running on --socket (an upgrade of mountd
    /// itself); without one running, start empty.
    #[arg(long)]
    pub take_over: bool,
    #[command(flatten)]
    pub tuning: MountTuning,
}

/// `modelcas csi`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct CsiArgs {
    /// Where kubelet reaches the plugin: unix:///csi/csi.sock.
    #[arg(long, env = "CSI_ENDPOINT")]
    pub endpoint: String,
    /// This node's name, as kubelet knows it.
    #[arg(long, env = "MODELCAS_NODE_ID")]
    pub node_id: String,
    /// The node's mountd, which keeps the volumes' mounts.
    #[arg(long, env = "MODELCAS_MOUNTD_SOCKET", default_value = mountd::socket::DEFAULT_SOCKET)]
    pub mountd_socket: PathBuf,
    /// How long a publish waits for the store to resolve its revision before it answers
    /// UNAVAILABLE (kubelet gives a publish about 2 minutes, then retries).
    #[arg(long, env = "MODELCAS_CSI_RESOLVE_TIMEOUT", value_name = "DURATION",
          default_value = "45s", value_parser = parse_duration)]
    pub resolve_timeout: Duration,
}

/// `modelcas gc`'s flags (each falls back to `[gc]` in the config file).
#[derive(clap::Args, Debug, Clone)]
pub struct GcArgs {
    /// Keep the N most recently ingested revisions of each repository (besides those
    /// refs point at and pinned ones): exactly N, in the order of the store's clock when
    /// each was published (milliseconds), then a sequence, then the commit id.
    #[arg(long, env = "MODELCAS_GC_KEEP_LAST", value_name = "N")]
    pub keep_last: Option<usize>,
    /// Keep revisions ingested within this long, by the object store's clock (e.g. 30d,
    /// 12h, 1d12h).
    #[arg(long, env = "MODELCAS_GC_KEEP_WITHIN", value_name = "DURATION", value_parser = parse_duration)]
    pub keep_within: Option<Duration>,
    /// Keep revisions used (by a mount, serve, checkout, cat or pull) or ingested within
    /// this long, by the object store's clock; expire the others unless a ref, pin or
    /// version lock protects them (e.g. 30d). At least 1h: a process using a revision
    /// rewrites its last-use record every 10 minutes at most, so shorter is refused.
    #[arg(long, env = "MODELCAS_GC_UNUSED_FOR", value_name = "DURATION", value_parser = parse_duration)]
    pub unused_for: Option<Duration>,
    /// Time between marking a pack unused and deleting it: bounds how long a mount can
    /// keep reading a revision that expired while open (default 24h).
    #[arg(long, env = "MODELCAS_GC_GRACE", value_name = "DURATION", value_parser = parse_duration)]
    pub grace: Option<Duration>,
    /// Rewrite packs whose live fraction is below this (0..1; default 0.8).
    #[arg(long, env = "MODELCAS_GC_REWRITE_BELOW", value_name = "FRACTION")]
    pub rewrite_below: Option<f64>,
    /// Print what would be expired and reclaimed; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

impl GcArgs {
    /// The flags as gc takes them, over the config file's settings.
    pub fn flags(&self) -> GcFlags {
        GcFlags {
            policy: Policy {
                keep_last: self.keep_last,
                keep_within: self.keep_within,
                unused_for: self.unused_for,
            },
            grace: self.grace,
            rewrite_below: self.rewrite_below,
            dry_run: self.dry_run,
        }
    }
}

/// `modelcas serve`'s flags (each falls back to `[serve]` in the config file).
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address to listen on (default 127.0.0.1:8080).
    #[arg(long, env = "MODELCAS_LISTEN", value_name = "ADDR")]
    pub listen: Option<String>,
    /// Require `Authorization: Bearer <token>` with one of the tokens in this file (one per line).
    #[arg(long, env = "MODELCAS_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Serve the store API to nodes (`--store http://THIS-HUB` on GPU nodes) for the tokens
    /// in this file (one per line, as --token-file); without it the store API is off.
    #[arg(long, env = "MODELCAS_NODE_TOKEN_FILE", value_name = "FILE")]
    pub node_token_file: Option<PathBuf>,
    /// Serve the store API to nodes without a token (a closed network; logged at start).
    #[arg(long, env = "MODELCAS_NODE_API_OPEN")]
    pub node_api_open: bool,
    /// Threads reading the store (requests routed and chunks read at once; default 16).
    #[arg(long, env = "MODELCAS_SERVE_THREADS")]
    pub threads: Option<usize>,
    /// Memory for decoded chunks shared by every download, in MiB (read-ahead uses up
    /// to half of it; default 256).
    #[arg(long, env = "MODELCAS_SERVE_CACHE_MIB")]
    pub cache_mib: Option<usize>,
    /// Threads fetching, decompressing and verifying chunks ahead of the downloads
    /// (default 4, 16 for S3).
    #[arg(long, env = "MODELCAS_SERVE_FETCH_THREADS")]
    pub fetch_threads: Option<usize>,
    #[command(flatten)]
    pub limits: ServeLimitArgs,
    #[command(flatten)]
    pub upstream: UpstreamArgs,
    /// No pages for people: `/` and `/ui/...` answer 404 (the API is unchanged; `[serve]`
    /// `ui = false` does the same).
    #[arg(long)]
    pub no_ui: bool,
    /// Serve `[serve.locks]` commits that failed their release check (a warning per lock
    /// at start); without it serve refuses to start on one, and answers 403 for one the
    /// mirror fetches later.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub xet: XetArgs,
    #[command(flatten)]
    pub uploads: UploadArgs,
}

/// `modelcas serve`'s uploads, on for the tokens the token file gives `write=` scopes (each
/// falls back to `[serve]` in the config file).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct UploadArgs {
    /// Where uploaded files wait for their commit (default: the user's cache directory,
    /// `modelcas/uploads/<store id>`).
    #[arg(long, env = "MODELCAS_SERVE_UPLOAD_DIR", value_name = "DIR")]
    pub upload_dir: Option<PathBuf>,
    /// Take uploads to repositories the mirror brought from upstream (refused by default:
    /// the upstream's next revision would move their refs again).
    #[arg(long, env = "MODELCAS_SERVE_UPLOAD_OVER_MIRROR")]
    pub upload_over_mirror: bool,
    /// Leave a branch where it was when the uploaded revision fails its release check (it
    /// is stored all the same; the commit answers 422 ReleaseCheckFailed).
    #[arg(long, env = "MODELCAS_SERVE_UPLOAD_HOLD_FAILING")]
    pub upload_hold_failing: bool,
}

/// `modelcas serve`'s Xet downloads (each falls back to `[serve]` in the config file).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct XetArgs {
    /// Do not offer Xet downloads (no `xetHash`, no Xet headers, no Xet routes).
    #[arg(long, env = "MODELCAS_SERVE_NO_XET")]
    pub no_xet: bool,
    /// The key of Xet read tokens and fetch URLs, from this file (at least 32 bytes;
    /// default: made once and kept in the index directory, one per machine; serve replicas behind one address need this file).
    #[arg(long, env = "MODELCAS_SERVE_XET_SECRET_FILE", value_name = "FILE")]
    pub xet_secret_file: Option<PathBuf>,
    /// Lifetime of a Xet read token (default 1h).
    #[arg(long, env = "MODELCAS_SERVE_XET_TOKEN_TTL", value_name = "DURATION")]
    pub xet_token_ttl: Option<String>,
    /// Lifetime of a Xet fetch URL (default 1h).
    #[arg(long, env = "MODELCAS_SERVE_XET_URL_TTL", value_name = "DURATION")]
    pub xet_url_ttl: Option<String>,
    /// The URL clients reach this server at, for Xet (default: http:// and the request's Host).
    #[arg(long, env = "MODELCAS_SERVE_XET_CAS_URL", value_name = "URL")]
    pub xet_cas_url: Option<String>,
}

/// `modelcas serve`'s pull-through mirror and repository policy (each falls back to
/// `[serve]` in the config file; locks are in the file only: `[serve.locks]`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct UpstreamArgs {
    /// Pull what the store lacks from this Hub (a pull-through mirror), then serve it.
    #[arg(long, env = "MODELCAS_SERVE_UPSTREAM", value_name = "URL")]
    pub upstream: Option<String>,
    /// The token the mirror sends to the upstream, from this file (first non-comment
    /// line; default: HF_TOKEN in serve's environment). Clients never need it.
    #[arg(long, env = "MODELCAS_SERVE_UPSTREAM_TOKEN_FILE", value_name = "FILE")]
    pub upstream_token_file: Option<PathBuf>,
    /// How long a branch or tag name's upstream commit is trusted before asking again
    /// (default 60s; commits are never asked again).
    #[arg(long, env = "MODELCAS_SERVE_UPSTREAM_TTL", value_name = "DURATION")]
    pub upstream_ttl: Option<String>,
    /// Files downloaded from the upstream at once, across all pulls (default 4).
    #[arg(long, env = "MODELCAS_SERVE_UPSTREAM_JOBS", value_name = "N")]
    pub upstream_jobs: Option<usize>,
    /// An origin besides the upstream's own that its redirects may lead to, e.g. its CDN
    /// (`https://cdn.example.com`, `*.example.com`, `http://host:8080`; repeatable).
    /// Others are refused; the public Hub's CDNs are known. The token never goes there.
    #[arg(long = "upstream-redirect-host", value_name = "ORIGIN")]
    pub upstream_redirect_hosts: Vec<String>,
    /// Deadline of one request to the upstream for metadata (body included), and the
    /// grace of a download before `--upstream-min-rate` applies (default 60s).
    #[arg(long, env = "MODELCAS_SERVE_UPSTREAM_TIMEOUT", value_name = "DURATION")]
    pub upstream_timeout: Option<String>,
    /// A download from the upstream that falls under this average rate (per second)
    /// after its grace is cut and the pull fails (default 64K; 0: no minimum).
    #[arg(long, env = "MODELCAS_SERVE_UPSTREAM_MIN_RATE", value_name = "SIZE")]
    pub upstream_min_rate: Option<String>,
    /// Most files an upstream revision may list; a larger listing is refused (default
    /// 250000).
    #[arg(long, env = "MODELCAS_SERVE_UPSTREAM_MAX_FILES", value_name = "N")]
    pub upstream_max_files: Option<usize>,
    /// Serve (and pull) only repositories matching this pattern (`org/*`; repeatable);
    /// others get 403.
    #[arg(long = "allow", value_name = "PATTERN")]
    pub allow: Vec<String>,
}

/// `modelcas pull`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct PullArgs {
    /// ORG/NAME, or ORG/NAME@REV (a branch, tag or commit sha; default main).
    #[arg(value_name = "ORG/NAME[@REV]")]
    pub target: String,
    /// The Hub to pull from (default: HF_ENDPOINT, else https://huggingface.co).
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// Access token for gated or private repositories (default: HF_TOKEN).
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Only files matching this glob (repeatable; `*` matches `/` too, as in `hf download`).
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,
    /// Leave out files matching this glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Also set this ref to the pulled commit (repeatable; a branch or tag REV is set anyway).
    #[arg(long = "ref", value_name = "NAME")]
    pub refs: Vec<String>,
    /// Files downloaded at a time (default 4).
    #[arg(long, env = "MODELCAS_PULL_JOBS", value_name = "N")]
    pub jobs: Option<usize>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `modelcas sync`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct SyncArgs {
    /// The prefetch list (TOML: `[[model]]` entries with repo, revision, include, exclude, refs).
    #[arg(value_name = "LIST.toml")]
    pub list: PathBuf,
    /// The Hub to pull from (default: the list's `endpoint`, else HF_ENDPOINT, else
    /// https://huggingface.co).
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// Access token for gated or private repositories (default: HF_TOKEN).
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Files downloaded at a time within each entry (default 4).
    #[arg(long, env = "MODELCAS_PULL_JOBS", value_name = "N")]
    pub jobs: Option<usize>,
    /// Resolve each entry upstream and say what would be done; download and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Only read and check the list; contact nothing, open no store.
    #[arg(long, conflicts_with = "dry_run")]
    pub check: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Move the entries' refs even to a revision whose release check failed (or could not
    /// be made); without it such an entry is stored, its refs left where they were, and
    /// reported `held back` (exit 1).
    #[arg(long)]
    pub force: bool,
}
