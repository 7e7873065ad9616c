//! Hubs and nodes for the fleet tests (issue 43): a `modelcas serve` with node tokens and its
//! own chunk cache, and "nodes": environments whose store is one or more hub addresses,
//! each with its own home, caches and index, and no bucket credentials.

use super::{Env, Served};

/// The node token every test hub accepts.
pub const NODE_TOKEN: &str = "node-secret-0123456789";

/// A hub on `env`'s store: node tokens from a file, a fresh chunk cache of its own (so a
/// local store's hub keeps frames too), `extra` flags and `vars`.
pub fn start_hub(env: &Env, extra: &[&str], vars: &[(&str, &str)]) -> Served {
    start_hub_at(env, &super::local_addr(), NODE_TOKEN, extra, vars)
}

/// A hub on `addr` accepting the node token `token` only.
pub fn start_hub_at(
    env: &Env,
    addr: &str,
    token: &str,
    extra: &[&str],
    vars: &[(&str, &str)],
) -> Served {
    let tokens = env.path(&format!("node-tokens-{}", rand::random::<u32>()));
    std::fs::write(&tokens, format!("# nodes\n{token}  # the fleet\n")).unwrap();
    let cache = env.path(&format!("hub-cache-{}", rand::random::<u32>()));
    let mut args = vec![
        "--node-token-file",
        tokens.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    Served::start_at(env, addr, &args, vars)
}

/// A node reading through `hubs` (`http://A,http://B`), with the node token.
pub fn node(hubs: &str) -> Env {
    let tmp = tempfile::Builder::new()
        .prefix("modelcas-test-node-")
        .tempdir()
        .unwrap();
    std::fs::write(tmp.path().join("hub-token"), format!("{NODE_TOKEN}\n")).unwrap();
    Env {
        tmp,
        s3: None,
        location: hubs.to_string(),
        read_only: false,
    }
}

/// `http://ADDR` of a served hub.
pub fn url(h: &Served) -> String {
    format!("http://{}", h.addr)
}
