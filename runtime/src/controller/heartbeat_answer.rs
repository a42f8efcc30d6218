//! The answer to a heartbeat body, the same for both entry points (the router's handler and the
//! route served ahead of the router): the body read with bad `vms` entries set aside, the
//! heartbeat taken, `200` with an empty body as a PPN controller answers, and unknown fields
//! (already counted and logged) as `Warning` headers.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::heartbeat::take_heartbeat_with;
use super::heartbeat_entries;
use super::shared::Controller;
use crate::http::ApiFailure;

/// Reads `body` as a heartbeat and takes it.
pub async fn answer(controller: &Controller, body: &[u8]) -> Result<Response, ApiFailure> {
    let (heartbeat, rejected) = heartbeat_entries::read(body)?;
    let unknown = heartbeat.unknown_fields;
    take_heartbeat_with(controller, heartbeat.value, rejected).await?;
    let mut response = StatusCode::OK.into_response();
    // A heartbeat without unknown fields pays nothing for them.
    if !unknown.is_empty() {
        crate::unknown_fields::add_warnings(response.headers_mut(), &unknown);
    }
    Ok(response)
}
