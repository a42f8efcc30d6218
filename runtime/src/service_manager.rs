//! Telling systemd (a `Type=notify` unit, packaging/*.service) when a service is ready and
//! when it stops. Without NOTIFY_SOCKET (not started by systemd) each call does nothing.
//! A leaf module: the controller and the agent call it.

use sd_notify::NotifyState;

/// READY=1: the listener is bound and the service answers; systemd starts the units ordered
/// after this one.
pub fn ready(service: &str) {
    send(service, NotifyState::Ready);
}

/// STOPPING=1: shutdown has begun (drains and flushes may take a while).
pub fn stopping(service: &str) {
    send(service, NotifyState::Stopping);
}

fn send(service: &str, state: NotifyState<'_>) {
    let message = state.to_string();
    if let Err(error) = sd_notify::notify(&[state]) {
        // Not fatal: the service works; only systemd's view of it lags.
        tracing::warn!(%error, "{service}: cannot notify systemd ({message})");
    }
}
