//! TLS for fleetwire's HTTP clients: rustls with the ring provider (rcgen already builds ring,
//! so no second crypto library comes in). reqwest is built with `rustls-no-provider`, which
//! needs the process's provider installed before any client is built, plain or not.

use std::sync::Once;

/// Installs ring as the process's rustls provider; every later call does nothing. Called by
/// `main` and by each place that builds a `reqwest::Client`, so unit tests are covered too.
pub fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // Err: another provider was installed first (an embedding program's); it is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A `reqwest::ClientBuilder` once the provider is installed.
pub fn client_builder() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
}
