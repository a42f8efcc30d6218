//! The controller's own certificates (docs/security.md): its HTTPS server certificate, valid
//! for the names agents and operators reach it by, and its client certificate towards the
//! agents and runtimes. Both are issued from the node CA at start, kept in memory only, and
//! renewed at two thirds of their validity while the controller runs.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::controller::trust::certs::{ControllerIdentity, NodeCa, ServerName};
use crate::fleet_identity::renewal_due;
use crate::tls_server::{certified_key, ReloadableCert};

/// The names the server certificate is valid for: `extra` (`--tls-name`), this host's name,
/// `localhost` and every address of the host's interfaces, without repeats.
pub fn server_names(extra: &[String]) -> Vec<ServerName> {
    let mut names: Vec<ServerName> = extra
        .iter()
        .map(|n| n.parse().expect("infallible"))
        .collect();
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let host = host.trim();
        if !host.is_empty() {
            names.push(ServerName::Dns(host.to_string()));
        }
    }
    names.push(ServerName::Dns("localhost".to_string()));
    match if_addrs::get_if_addrs() {
        Ok(interfaces) => names.extend(interfaces.into_iter().map(|i| ServerName::Ip(i.ip()))),
        Err(error) => tracing::warn!(
            %error,
            "cannot list this host's addresses for the server certificate; it names only --tls-name, the host name and localhost"
        ),
    }
    let mut unique = Vec::with_capacity(names.len());
    for name in names {
        if !unique.contains(&name) {
            unique.push(name);
        }
    }
    unique
}

/// Issues the server certificate for `names`, as rustls serves it (leaf, then the CA).
pub fn issue_server(
    ca: &NodeCa,
    names: &[ServerName],
) -> anyhow::Result<(Arc<rustls::sign::CertifiedKey>, ControllerIdentity)> {
    let issued = ca.issue_controller_server(names)?;
    let chain = format!("{}{}", issued.cert_pem, ca.ca_pem());
    let key = certified_key(
        &chain,
        &issued.key_pem,
        "the controller's server certificate",
    )?;
    Ok((key, issued))
}

/// How long from `now` until `due` (zero when past).
pub fn until(due: SystemTime, now: SystemTime) -> Duration {
    due.duration_since(now).unwrap_or(Duration::ZERO)
}

/// A failed renewal is retried this much later, while the current certificate is valid.
pub const RETRY: Duration = Duration::from_secs(60);

/// Renews the server certificate (in `served`) as it comes due, for as long as the process
/// serves: on a standby too, whose `/readyz` a load balancer checks over HTTPS.
pub async fn renew_server(
    ca: NodeCa,
    served: Arc<ReloadableCert>,
    names: Vec<ServerName>,
    mut due: SystemTime,
) {
    loop {
        tokio::time::sleep(until(due, SystemTime::now())).await;
        due = match issue_server(&ca, &names) {
            Ok((key, issued)) => {
                served.replace(key);
                tracing::info!("renewed the controller's server certificate");
                renewal_due(issued.not_before, issued.not_after)
            }
            Err(error) => {
                tracing::error!("renewing the controller's server certificate: {error:#}");
                SystemTime::now() + RETRY
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_runs_to_the_renewal_and_not_below_zero() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let due = renewal_due(start, start + Duration::from_secs(300));
        assert_eq!(until(due, start), Duration::from_secs(200));
        assert_eq!(until(start, due), Duration::ZERO);
    }

    #[test]
    fn the_server_names_hold_the_extra_names_localhost_and_loopback_once() {
        let names = server_names(&[
            "fleet.example".into(),
            "10.9.8.7".into(),
            "localhost".into(),
        ]);
        assert_eq!(names[0], ServerName::Dns("fleet.example".into()));
        assert_eq!(names[1], ServerName::Ip("10.9.8.7".parse().unwrap()));
        let localhost = ServerName::Dns("localhost".into());
        assert_eq!(names.iter().filter(|n| **n == localhost).count(), 1);
        assert!(names.contains(&ServerName::Ip("127.0.0.1".parse().unwrap())));
    }

    #[test]
    fn the_server_certificate_is_served_with_its_ca_and_names_the_controller() {
        let dir = tempfile::tempdir().unwrap();
        let ca = NodeCa::open_or_create(dir.path(), Duration::from_secs(3600)).unwrap();
        let (key, issued) = issue_server(&ca, &server_names(&[])).unwrap();
        assert_eq!(key.cert.len(), 2, "leaf and CA");
        assert_eq!(
            crate::fleet_identity::identify(key.cert[0].as_ref()),
            Some(crate::fleet_identity::PeerIdentity::Controller)
        );
        assert!(issued.not_after > SystemTime::now());
    }
}
