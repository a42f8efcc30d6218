//! Connection and TLS failures said as what to check (docs/operator-cli.md, "When a command
//! fails"): the wrong CA file, an agent's port taken for the controller's, an expired
//! certificate, nothing listening, HTTP against HTTPS and back; each a sentence naming the
//! address and the file, with the underlying error after it.

use std::path::Path;
use std::time::Duration;

use rustls::CertificateError;

/// The sentence for a call that got no answer, or `None` when the failure is not one of these
/// (then the error speaks for itself).
pub fn explain(
    error: &fleetwire_client::Error,
    url: &reqwest::Url,
    ca_file: Option<&Path>,
) -> Option<String> {
    let fleetwire_client::Error::Transport { source, .. } = error else {
        return None;
    };
    let address = address(url);
    let plain = url.scheme() == "http";
    let ca = ca_file.map_or_else(
        || "the CA file".to_string(),
        |path| format!("the CA file {}", path.display()),
    );
    let advice = match cause(source) {
        Cause::Tls(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)) => {
            format!(
                "the server at {address} has a certificate that {ca} did not sign: check that it \
                 is this fleet's CA, the controller's <data-dir>/ca/ca.pem (for `fleetwire up`, \
                 .fleetwire/controller/ca/ca.pem), and that {address} is this fleet's controller"
            )
        }
        Cause::Tls(rustls::Error::InvalidCertificate(
            CertificateError::ApplicationVerificationFailure,
        )) => format!(
            "the server at {address} has a certificate of this fleet, but it is not the \
             controller's: is {address} an agent's port (9204 by default) rather than the \
             controller's (9203 by default)?"
        ),
        Cause::Tls(rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        )) => format!(
            "the certificate of the server at {address} has expired: check this machine's clock \
             and the controller host's (a running controller renews its own certificate, so an \
             expired one means a clock that is off, or a server that is not the controller)"
        ),
        Cause::Tls(rustls::Error::InvalidCertificate(
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. },
        )) => format!(
            "the certificate of the server at {address} is not valid yet: check this machine's \
             clock and the controller host's"
        ),
        Cause::Tls(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        )) => format!(
            "the controller's certificate does not name {}: call it by a name or address it was \
             issued for (the controller's --tls-name)",
            url.host_str().unwrap_or_default()
        ),
        Cause::Tls(rustls::Error::InvalidMessage(_)) => {
            format!(
                "the server at {address} does not speak TLS: a controller started with \
                 --plain-http serves plain HTTP (then use http://{address} and --plain-http), \
                 or {address} is not the controller"
            )
        }
        Cause::Tls(_) => return None,
        Cause::Refused => format!(
            "nothing listens at {address}: is the controller running there (`fleetwire up`, or \
             the fleetwire-controller service), and is {} its port?",
            url.port_or_known_default().unwrap_or_default()
        ),
        Cause::TimedOut => format!(
            "no answer from {address} in time: check that the controller runs there and that \
             no firewall drops the connection"
        ),
        Cause::Other if plain => format!(
            "the server at {address} did not answer plain HTTP: a controller serves HTTPS unless \
             it was started with --plain-http; use https://{address} with --ca-file"
        ),
        Cause::Other => return None,
    };
    Some(format!("{advice} (underlying error: {error})"))
}

/// What an `http://` address without `--plain-http` is, asked with one credential-free `GET
/// /healthz` in plain HTTP, so the advice fits the controller that is there: `--plain-http`
/// for a plain controller, `https://` for the others.
pub fn plain_or_tls(url: &reqwest::Url) -> String {
    let address = address(url);
    let probe = async {
        let client = crate::tls::client_builder()
            .timeout(Duration::from_secs(2))
            .build()
            .ok()?;
        let answer = client.get(url.join("/healthz").ok()?).send().await;
        Some(answer.map(|_| ()).map_err(|e| cause(&e)))
    };
    let answered = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()
        .and_then(|runtime| runtime.block_on(probe));
    match answered {
        Some(Ok(())) => format!(
            "{url} is plain http://, and the controller at {address} serves plain HTTP (it was \
             started with --plain-http): choose that with --plain-http (or \
             FLEETWIRE_PLAIN_HTTP=true, or plain_http = true in the config file)"
        ),
        Some(Err(Cause::Refused)) => format!(
            "{url} is plain http://, and nothing listens at {address}; a controller serves \
             https:// unless it was started with --plain-http"
        ),
        _ => format!(
            "{url} is plain http://, but the server at {address} does not answer plain HTTP: a \
             controller serves HTTPS unless it was started with --plain-http; use \
             https://{address} with --ca-file"
        ),
    }
}

fn address(url: &reqwest::Url) -> String {
    format!(
        "{}:{}",
        url.host_str().unwrap_or_default(),
        url.port_or_known_default().unwrap_or_default()
    )
}

/// The cause that decides the advice, found along the error's chain.
enum Cause {
    Tls(rustls::Error),
    Refused,
    TimedOut,
    Other,
}

fn cause(error: &reqwest::Error) -> Cause {
    if error.is_timeout() {
        return Cause::TimedOut;
    }
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = next {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Cause::Tls(tls.clone());
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => return Cause::Refused,
                std::io::ErrorKind::TimedOut => return Cause::TimedOut,
                _ => {}
            }
            // An io::Error's source() skips the error it wraps (rustls' is in there, inside
            // another io::Error or two): follow what it wraps instead.
            if let Some(inner) = io.get_ref() {
                next = Some(inner);
                continue;
            }
        }
        next = e.source();
    }
    Cause::Other
}
