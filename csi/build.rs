//! Generates the CSI v1 bindings (messages, the Identity and Node servers and clients) from
//! the vendored `proto/csi.proto`, with no protoc: protox parses the file in Rust (it
//! bundles the `google/protobuf/*` files csi.proto imports), tonic-prost-build generates
//! from the descriptor set.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/csi.proto");
    let fds = protox::compile(["csi.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        // The client is generic over the transport (no `connect`, which needs tonic's
        // `channel` feature): the tests drive it over the unix socket.
        .build_client(true)
        .build_transport(false)
        .compile_fds(fds)?;
    Ok(())
}
