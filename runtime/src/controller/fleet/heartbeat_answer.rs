//! The answer to a heartbeat body, the same for both entry points (the router's handler and the
//! route served ahead of the router): the body read with bad `vms` entries set aside, the
//! heartbeat taken, `200` with an empty body as a PPN controller answers, and unknown fields
//! (already counted and logged) as `Warning` headers.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::controller::fleet::heartbeat::take_heartbeat_with;
use crate::controller::rules::heartbeat_entries;
use crate::controller::shared::Controller;
use crate::fleet_identity::PeerIdentity;
use crate::http::ApiFailure;

/// Reads `body` as a heartbeat and takes it, from the sender its connection's certificate
/// names (`presented`; checked in mTLS mode only).
pub async fn answer(
    controller: &Controller,
    body: &[u8],
    presented: Option<&PeerIdentity>,
) -> Result<Response, ApiFailure> {
    let started = std::time::Instant::now();
    let (heartbeat, rejected) = heartbeat_entries::read(body)?;
    controller
        .metrics
        .heartbeat_phases
        .read
        .observe(started.elapsed().as_secs_f64());
    let unknown = heartbeat.unknown_fields;
    let caller = controller.node_caller(presented);
    take_heartbeat_with(controller, heartbeat.value, rejected, caller).await?;
    let mut response = StatusCode::OK.into_response();
    // A heartbeat without unknown fields pays nothing for them.
    if !unknown.is_empty() {
        crate::unknown_fields::add_warnings(response.headers_mut(), &unknown);
    }
    Ok(response)
}
