//! The floor the controller's heartbeat path is measured against: the same HTTP stack (axum
//! on a multi-threaded tokio runtime) answering `POST /v1/nodes/heartbeat` from memory, with a
//! plain serde parse (no schema validation) and no store. Run it, then point
//! `fleetwire-loadgen` at it; see docs/performance.md.
//!
//! `cargo run --release -p fleetwire --example heartbeat_floor -- 127.0.0.1:19204`

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use parking_lot::Mutex;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The fields a PPN controller keeps from a heartbeat, without any of the schema's checks.
#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Heartbeat {
    node_id: String,
    wg_ip: String,
    hostname: String,
    ram_total_mb: u64,
    ram_used_mb: u64,
    kvm_available: bool,
    vms: Vec<serde_json::Value>,
}

type Nodes = Arc<Mutex<HashMap<String, Heartbeat>>>;

async fn heartbeat(State(nodes): State<Nodes>, body: Bytes) -> StatusCode {
    match serde_json::from_slice::<Heartbeat>(&body) {
        Ok(hb) => {
            nodes.lock().insert(hb.node_id.clone(), hb);
            StatusCode::OK
        }
        Err(_) => StatusCode::BAD_REQUEST,
    }
}

async fn serve_hyper(listen: &str, nodes: Nodes) {
    use http_body_util::{BodyExt, Full};
    let listener = tokio::net::TcpListener::bind(listen).await.unwrap();
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        stream.set_nodelay(true).unwrap();
        let nodes = nodes.clone();
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let nodes = nodes.clone();
                    async move {
                        let body = req.into_body().collect().await?.to_bytes();
                        let status = heartbeat(State(nodes), body).await;
                        let mut response = hyper::Response::new(Full::new(Bytes::new()));
                        *response.status_mut() = status;
                        Ok::<_, hyper::Error>(response)
                    }
                });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

#[tokio::main]
async fn main() {
    let listen = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:19204".into());
    let nodes: Nodes = Arc::default();
    if std::env::args().nth(2).as_deref() == Some("hyper") {
        return serve_hyper(&listen, nodes).await;
    }
    let app = Router::new()
        .route("/v1/nodes/heartbeat", post(heartbeat))
        .route(
            "/v1/fleet",
            axum::routing::get(|State(nodes): State<Nodes>| async move {
                format!("{{\"nodes\":{}}}", nodes.lock().len())
            }),
        )
        .with_state(nodes);
    let listener = tokio::net::TcpListener::bind(&listen).await.unwrap();
    if std::env::args().nth(2).as_deref() == Some("axum-http1") {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            stream.set_nodelay(true).unwrap();
            let service = hyper_util::service::TowerToHyperService::new(app.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    }
    axum::serve(listener, app).await.unwrap();
}
