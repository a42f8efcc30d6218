//! The signal every fleetwire program stops on.

/// Resolves on the first SIGTERM (systemd, `kill`) or SIGINT (Ctrl-C).
pub async fn signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("installing a SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
