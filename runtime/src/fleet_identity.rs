//! Who a fleet certificate names: the one place that says how the node CA marks a node's
//! certificate apart from the controller's own, for the CA that writes the marks
//! (`controller::trust::certs`) and the servers that read them (the controller's node routes, the
//! agent's local API). Like Kubernetes' `system:nodes` organization, the mark is the subject's
//! organization; the node id is the certificate's DNS name (docs/security.md).

use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The subject organization of every node certificate.
pub const NODE_ORGANIZATION: &str = "fleetwire node";
/// The subject organization of the controller's certificates (its client identity towards the
/// agents and runtimes, and its HTTPS server certificate): the mark `fleetwire-client` checks.
pub use fleetwire_client::CONTROLLER_ORGANIZATION;

/// The party a certificate the fleet CA issued stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerIdentity {
    /// A node: its id, and the serial of the certificate it presented (lower-case hex, as the
    /// node record's `cert_serial`), so a replaced certificate can be told from the current one.
    Node { node_id: String, serial_hex: String },
    /// The controller.
    Controller,
}

/// What a certificate presented by a TLS peer says. `None` for a certificate that carries
/// neither mark, or that cannot be read: it names nobody. Only call this on a certificate the
/// TLS layer verified against the fleet CA; the marks mean nothing on any other.
pub fn identify(cert_der: &[u8]) -> Option<PeerIdentity> {
    let (_, cert) = X509Certificate::from_der(cert_der).ok()?;
    let organization = cert
        .subject()
        .iter_organization()
        .next()
        .and_then(|o| o.as_str().ok())?;
    match organization {
        NODE_ORGANIZATION => {
            let names = cert.subject_alternative_name().ok()??;
            let mut dns = names
                .value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    GeneralName::DNSName(dns) => Some(*dns),
                    _ => None,
                });
            // The CA writes exactly one DNS name, the node id: anything else names nobody.
            let node_id = dns.next()?;
            if dns.next().is_some() {
                return None;
            }
            Some(PeerIdentity::Node {
                node_id: node_id.to_string(),
                serial_hex: serial_hex(cert.raw_serial()),
            })
        }
        CONTROLLER_ORGANIZATION => Some(PeerIdentity::Controller),
        _ => None,
    }
}

/// When a certificate valid from `not_before` to `not_after` is renewed, by whoever holds it
/// (the agent its node certificate, the controller its own): two thirds in, which leaves a
/// third of its life to retry while the issuer is away (kubelet renews at 70 to 90 %).
pub fn renewal_due(
    not_before: std::time::SystemTime,
    not_after: std::time::SystemTime,
) -> std::time::SystemTime {
    let lifetime = not_after
        .duration_since(not_before)
        .unwrap_or(std::time::Duration::ZERO);
    not_before + lifetime * 2 / 3
}

/// A serial's DER integer bytes in lower-case hex, two digits a byte: the form the CA records
/// (`controller::trust::certs::IssuedCert::serial_hex`; its serials are positive and minimal, so
/// the bytes it chose are the bytes the certificate carries).
pub fn serial_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair, SanType};

    fn certificate(organization: &str, dns: &[&str]) -> Vec<u8> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::OrganizationName, organization);
        for name in dns {
            params
                .subject_alt_names
                .push(SanType::DnsName((*name).try_into().unwrap()));
        }
        params.serial_number = Some(rcgen::SerialNumber::from_slice(&[0x0a, 0x01]));
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn a_node_certificate_names_its_node_and_serial() {
        assert_eq!(
            identify(&certificate(NODE_ORGANIZATION, &["gpu-01.dc1"])),
            Some(PeerIdentity::Node {
                node_id: "gpu-01.dc1".into(),
                serial_hex: "0a01".into()
            })
        );
    }

    #[test]
    fn the_controller_mark_names_the_controller() {
        assert_eq!(
            identify(&certificate(CONTROLLER_ORGANIZATION, &[])),
            Some(PeerIdentity::Controller)
        );
    }

    #[test]
    fn renewal_comes_two_thirds_in() {
        let start = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1000);
        let end = start + std::time::Duration::from_secs(300);
        assert_eq!(
            renewal_due(start, end),
            start + std::time::Duration::from_secs(200)
        );
        assert_eq!(
            renewal_due(end, start),
            end,
            "a backwards span renews at once"
        );
    }

    #[test]
    fn anything_else_names_nobody() {
        assert_eq!(identify(&certificate("someone else", &["n1"])), None);
        assert_eq!(identify(&certificate(NODE_ORGANIZATION, &[])), None);
        assert_eq!(identify(&certificate(NODE_ORGANIZATION, &["a", "b"])), None);
        assert_eq!(identify(b"not a certificate"), None);
    }
}
