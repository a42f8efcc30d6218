//! Target 3: the controller's CSR path, `NodeCa::sign` (what a registration's `csr_pem` goes
//! through: the PEM and the request parsed, the key's strength, the signature, the signing).
//!
//! The first input byte picks how the rest is given: even, as the PEM text itself (the PEM
//! layer fuzzed); odd, as the DER of a request, put into a PEM block here (the DER and the key
//! checks fuzzed without the fuzzer having to keep base64 intact).
//!
//! Properties, for a request that is signed:
//! - the certificate's subject and names are the controller's choice, never the request's:
//!   organization "fleetwire node" and common name the node id, DNS name the node id and IP
//!   addresses the WireGuard address and the node's addresses, nothing else;
//! - it is no CA, is for server and client authentication, is issued by the node CA and is
//!   valid no longer than the CA's validity (plus the backdating);
//! - its key is the request's key (the first PEM block, the one whose strength was checked)
//!   and a key of the strength the CA signs for: RSA of 2048 bits or more, ECDSA on P-256 or
//!   P-384, or Ed25519.
//!
//!   Refused requests only need to be refused with a message.

use std::net::Ipv4Addr;
use std::sync::OnceLock;
use std::time::Duration;

use base64::Engine;
use fleetwire::controller::trust::certs::NodeCa;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::public_key::PublicKey;

const NODE_ID: &str = "node-fuzz-01.dc1";
const WG_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 9);
const ADDRESS: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 9);
const VALIDITY: Duration = Duration::from_secs(86_400);

struct Ca {
    _dir: tempfile::TempDir,
    ca: NodeCa,
    subject_der: Vec<u8>,
}

fn ca() -> &'static Ca {
    static CA: OnceLock<Ca> = OnceLock::new();
    CA.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let ca = NodeCa::open_or_create(dir.path(), VALIDITY).expect("a node CA");
        let (_, pem) = x509_parser::pem::parse_x509_pem(ca.ca_pem().as_bytes()).expect("CA PEM");
        let cert = pem.parse_x509().expect("the CA certificate");
        let subject_der = cert.subject().as_raw().to_vec();
        Ca {
            _dir: dir,
            ca,
            subject_der,
        }
    })
}

/// Makes the node CA (its key and certificate) once, before the fuzzer's loop.
pub fn prepare() {
    ca();
}

/// The PEM text the input stands for (see the module's comment).
pub fn csr_text(data: &[u8]) -> Option<String> {
    let (&mode, rest) = data.split_first()?;
    if mode.is_multiple_of(2) {
        // `csr_pem` arrives as a JSON string: always UTF-8.
        return std::str::from_utf8(rest).ok().map(str::to_string);
    }
    let body = base64::engine::general_purpose::STANDARD.encode(rest);
    let mut pem = String::from("-----BEGIN CERTIFICATE REQUEST-----\n");
    for line in body.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE REQUEST-----\n");
    Some(pem)
}

pub fn check(data: &[u8]) {
    let Some(pem) = csr_text(data) else {
        return;
    };
    let ca = ca();
    match ca.ca.sign(&pem, NODE_ID, WG_IP, &[ADDRESS, WG_IP]) {
        Ok(issued) => check_issued(ca, &pem, &issued.cert_pem),
        Err(refused) => assert!(!refused.to_string().is_empty()),
    }
}

fn check_issued(ca: &Ca, csr_pem: &str, cert_pem: &str) {
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).expect("issued PEM");
    let (_, cert) = X509Certificate::from_der(&pem.contents).expect("an issued certificate");

    let organizations: Vec<_> = cert
        .subject()
        .iter_organization()
        .map(|o| o.as_str().expect("a string").to_string())
        .collect();
    let names: Vec<_> = cert
        .subject()
        .iter_common_name()
        .map(|c| c.as_str().expect("a string").to_string())
        .collect();
    assert_eq!(organizations, ["fleetwire node"]);
    assert_eq!(names, [NODE_ID]);
    assert_eq!(cert.subject().iter().count(), 2, "{}", cert.subject());

    let sans = cert
        .subject_alternative_name()
        .expect("one SAN extension")
        .expect("a SAN extension");
    let sans: Vec<String> = sans
        .value
        .general_names
        .iter()
        .map(|name| match name {
            GeneralName::DNSName(dns) => format!("dns:{dns}"),
            GeneralName::IPAddress(ip) => format!("ip:{ip:?}"),
            other => format!("other:{other:?}"),
        })
        .collect();
    let expected = [
        format!("dns:{NODE_ID}"),
        format!("ip:{:?}", WG_IP.octets()),
        format!("ip:{:?}", ADDRESS.octets()),
    ];
    assert_eq!(
        sans, expected,
        "the certificate names what the request asked"
    );

    assert_ne!(
        cert.basic_constraints()
            .expect("one basic constraints extension")
            .map(|b| b.value.ca),
        Some(true),
        "a node certificate is never a CA"
    );
    let eku = cert
        .extended_key_usage()
        .expect("one EKU extension")
        .expect("an EKU extension")
        .value;
    assert!(eku.server_auth && eku.client_auth && !eku.any, "{eku:?}");
    assert_eq!(cert.issuer().as_raw(), ca.subject_der.as_slice());
    let lifetime = cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
    assert!(lifetime <= VALIDITY.as_secs() as i64 + 300, "{lifetime} s");

    // The key is the checked request's, and one the CA signs for.
    let (_, request_pem) =
        x509_parser::pem::parse_x509_pem(csr_pem.as_bytes()).expect("the request was PEM");
    let (_, request) = x509_parser::certification_request::X509CertificationRequest::from_der(
        &request_pem.contents,
    )
    .expect("the request was a CSR");
    let requested = &request.certification_request_info.subject_pki;
    let spki = cert.public_key();
    assert_eq!(
        spki.raw, requested.raw,
        "the certificate's key is not the checked request's"
    );
    let strong = match spki.parsed() {
        Ok(PublicKey::RSA(rsa)) => rsa.key_size() >= 2048,
        Ok(PublicKey::EC(_)) => {
            let curve = spki
                .algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.as_oid().ok());
            curve.is_some_and(|oid| {
                oid == x509_parser::oid_registry::OID_EC_P256
                    || oid == x509_parser::oid_registry::OID_NIST_EC_P384
            })
        }
        Ok(PublicKey::Unknown(_)) => {
            spki.algorithm.algorithm == x509_parser::oid_registry::OID_SIG_ED25519
        }
        _ => false,
    };
    assert!(
        strong,
        "a certificate issued for a weak key: {:?}",
        spki.algorithm
    );
}
