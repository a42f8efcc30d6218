//! The signal every fleetwire program stops on.

/// Installs the SIGTERM (systemd, `kill`) and SIGINT (Ctrl-C) handlers now, and returns what
/// resolves on the first of them. Installing them at the call, not when the future is first
/// polled, means a signal that comes after the program said it was ready (`fleetwire up`'s
/// banner, systemd's READY=1) stops it as any other would, instead of ending it with the
/// signal's default action. Must be called within the Tokio runtime.
pub fn signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("installing a SIGINT handler");
    async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
}
