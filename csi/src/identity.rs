//! The CSI Identity service: the plugin's name and version, its capabilities (none: there
//! is no Controller service), and readiness. node-driver-registrar calls GetPluginInfo to
//! register the driver; livenessprobe calls Probe, which reflects this process only, so
//! that a restarting mount daemon never gets the plugin killed.

use tonic::{Request, Response, Status};

use crate::proto::identity_server::Identity;
use crate::proto::{
    GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse, GetPluginInfoRequest,
    GetPluginInfoResponse, ProbeRequest, ProbeResponse,
};

/// The driver's name, as pods and PVs name it (`csi.driver`) and kubelet registers it.
pub const DRIVER_NAME: &str = "csi.modelcas.io";

/// The plugin's version, as GetPluginInfo reports it: this crate's.
pub const VENDOR_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Answers the Identity RPCs; holds nothing.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdentityService;

#[tonic::async_trait]
impl Identity for IdentityService {
    async fn get_plugin_info(
        &self,
        _request: Request<GetPluginInfoRequest>,
    ) -> Result<Response<GetPluginInfoResponse>, Status> {
        tracing::debug!(
            name = DRIVER_NAME,
            version = VENDOR_VERSION,
            "GetPluginInfo"
        );
        Ok(Response::new(GetPluginInfoResponse {
            name: DRIVER_NAME.to_owned(),
            vendor_version: VENDOR_VERSION.to_owned(),
            manifest: Default::default(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _request: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        tracing::debug!("GetPluginCapabilities: none (no Controller service)");
        Ok(Response::new(GetPluginCapabilitiesResponse {
            capabilities: Vec::new(),
        }))
    }

    async fn probe(
        &self,
        _request: Request<ProbeRequest>,
    ) -> Result<Response<ProbeResponse>, Status> {
        tracing::trace!("Probe: ready");
        Ok(Response::new(ProbeResponse { ready: Some(true) }))
    }
}
