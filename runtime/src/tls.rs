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

/// An HTTP client's error with its causes (the client crate's, which its errors use too).
pub use fleetwire_client::with_causes;

#[cfg(test)]
mod tests {
    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("error sending request")
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn an_error_is_told_with_its_causes() {
        let error = Outer(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "Connection refused",
        ));
        assert_eq!(
            super::with_causes(&error),
            "error sending request: Connection refused"
        );
    }

    #[tokio::test]
    async fn clients_build_once_the_provider_is_installed() {
        super::client_builder().build().unwrap();
    }
}
