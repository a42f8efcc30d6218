//! The fleet's two CAs (docs/security.md, "Identities"), as Kubernetes keeps separate CAs:
//!
//! - the **controller CA** (`ca.pem`, `ca.key`): signs only the controller's own certificates
//!   (its HTTPS server certificate, and its client certificate towards the agents and
//!   runtimes). It is the fleet CA that operators (`curl --cacert`, the operator config) and
//!   nodes (`VM_FLEET_CA_FILE`, pinned at enrollment) trust, so nothing it validates is a node;
//! - the **node CA** (`node-ca.pem`, `node-ca.key`): signs the CSR a node sends at registration
//!   as the node's certificate, and nothing else. Only the controller trusts it (for its node
//!   routes and the agents it calls); a node learns it as the issuer after its certificate in
//!   the chain the controller sends, for smolvm's fleet mode.
//!
//! A CA directory from a release that had one CA for both (`ca.pem` signing nodes too) is
//! migrated by opening it: the node CA is created next to it, and certificates the nodes hold
//! from `ca.pem` are still taken for them until they are renewed (the controller checks each
//! node's current serial, so a renewal retires the old one), and never after the date the store
//! recorded with the node CA (`store::fleet_ca`, [`FleetCa::with_legacy_until`]): the end of
//! the last of them.
//!
//! Like kubelet TLS bootstrapping, only the CSR's public key is used: the subject and subject
//! alternative names come from the validated node id and addresses (never loopback,
//! unspecified, nor the controller's own addresses), the certificate is never a CA, its
//! validity is bounded and its serial random. A node certificate serves on every side of the
//! node: the agent presents it to the controller and to smolvm's fleet-mode port, and serves
//! it on its local API (as smolvm does on its mTLS port), so it carries both the serverAuth and
//! the clientAuth usage. The controller's own certificates are kept in memory only and renewed
//! while it runs. The subject's organization says which kind a certificate is
//! (`fleet_identity`).

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName,
    DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use time::OffsetDateTime;
use x509_parser::prelude::FromDer;
use x509_parser::public_key::PublicKey;

use crate::fleet_identity::{serial_hex, CONTROLLER_ORGANIZATION, NODE_ORGANIZATION};

/// The controller CA: the fleet CA operators and nodes are given.
const CA_CERT_FILE: &str = "ca.pem";
const CA_KEY_FILE: &str = "ca.key";
/// The node CA.
const NODE_CA_CERT_FILE: &str = "node-ca.pem";
const NODE_CA_KEY_FILE: &str = "node-ca.key";
/// The CA's own validity.
const CA_VALIDITY: time::Duration = time::Duration::days(3650);
/// Tolerated clock skew between the controller and its nodes.
const BACKDATE: time::Duration = time::Duration::minutes(5);

/// How far before now a certificate valid for `validity` starts: [`BACKDATE`], but at most a
/// tenth of the validity. Renewal comes two thirds into the span from `not_before`, so five
/// minutes of backdating on a certificate of seconds (as tests issue) would make every
/// certificate due for renewal the moment it is issued.
fn backdate(validity: time::Duration) -> time::Duration {
    BACKDATE.min(validity / 10)
}

/// One CA: its key (as rcgen signs with it) and its certificate, PEM.
struct Authority {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl Authority {
    /// Opens the CA of `cert_file` and `key_file` in `dir`, creating its key and self-signed
    /// certificate (named `common_name`) when missing. Whether it was created.
    fn open_or_create(
        dir: &Path,
        cert_file: &str,
        key_file: &str,
        common_name: &str,
    ) -> anyhow::Result<(Authority, bool)> {
        let cert_path = dir.join(cert_file);
        let key_path = dir.join(key_file);
        if cert_path.exists() {
            let pem = std::fs::read_to_string(&cert_path)
                .with_context(|| format!("reading {}", cert_path.display()))?;
            let key_pem = std::fs::read_to_string(&key_path)
                .with_context(|| format!("reading {}", key_path.display()))?;
            let key = KeyPair::from_pem(&key_pem)
                .with_context(|| format!("{} is not a private key", key_path.display()))?;
            let issuer = Issuer::from_ca_cert_pem(&pem, key)
                .with_context(|| format!("{} is not a CA certificate", cert_path.display()))?;
            return Ok((Authority { issuer, pem }, false));
        }
        crate::atomic_file::create_private_dir(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
        // The key is written first: a key without its certificate is a creation that stopped
        // half way, finished now with the same key.
        let key = match std::fs::read_to_string(&key_path) {
            Ok(pem) => KeyPair::from_pem(&pem)
                .with_context(|| format!("{} is not a private key", key_path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = KeyPair::generate().context("generating the CA key")?;
                write_private(&key_path, key.serialize_pem().as_bytes())?;
                key
            }
            Err(e) => {
                return Err(e).with_context(|| format!("reading {}", key_path.display()));
            }
        };
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, common_name);
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - BACKDATE;
        params.not_after = now + CA_VALIDITY;
        params.serial_number = Some(random_serial().0);
        let cert = params
            .self_signed(&key)
            .with_context(|| format!("self-signing {common_name}"))?;
        let pem = cert.pem();
        write_file(&cert_path, pem.as_bytes())?;
        Ok((
            Authority {
                issuer: Issuer::new(params, key),
                pem,
            },
            true,
        ))
    }
}

/// The fleet's CAs, and what the node CA may name.
pub struct FleetCa {
    controller: Authority,
    node: Authority,
    validity: time::Duration,
    /// How long the controller's own certificates last ([`CONTROLLER_CERT_VALIDITY`] unless
    /// `--own-cert-validity` says otherwise).
    controller_validity: Duration,
    /// The controller's own addresses (its server certificate's): never in a node certificate.
    controller_ips: Vec<IpAddr>,
    /// The DNS names `--tls-name` gave the controller's server certificate: never a node id.
    controller_dns: Vec<String>,
    /// Until when a node certificate of the controller CA (from a release of one CA) is
    /// taken: never when `None`, as in a fleet that had the node CA from its start.
    legacy_until: Option<SystemTime>,
    dir: PathBuf,
}

/// A certificate issued to a node.
#[derive(Debug, Clone)]
pub struct IssuedCert {
    /// The node's certificate, then the node CA's (its issuer, for smolvm's fleet mode).
    pub cert_pem: String,
    /// The fleet CA (the controller CA) the node pins.
    pub ca_pem: String,
    /// Lower-case hex, as the schema's `CertSerial`.
    pub serial_hex: String,
    pub not_after: chrono::DateTime<chrono::Utc>,
}

/// Why a CSR was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsrRejected {
    /// Not a PEM certificate signing request rcgen can read.
    #[error("not a usable certificate signing request: {0}")]
    Unusable(String),
    /// The request's signature does not match its content and key (it was altered).
    #[error("the certificate signing request's signature does not verify")]
    BadSignature,
    /// A key too weak, or of a kind the fleet does not issue for.
    #[error("the certificate signing request's key is refused: {0}")]
    WeakKey(String),
    /// The node id cannot be the certificate's DNS name.
    #[error("node id as a DNS name: {0}")]
    NodeIdNotDns(String),
    /// The CA could not sign it.
    #[error("cannot sign the request: {0}")]
    Signing(String),
}

impl FleetCa {
    /// Opens the CAs in `dir`, creating the directory, keys and self-signed certificates on
    /// first use, and the node CA beside a controller CA of an older release (see the module's
    /// comment). Issued certificates are valid for `validity`.
    pub fn open_or_create(dir: &Path, validity: Duration) -> anyhow::Result<FleetCa> {
        let validity = time::Duration::try_from(validity).context("certificate validity")?;
        let (controller, created) =
            Authority::open_or_create(dir, CA_CERT_FILE, CA_KEY_FILE, "fleetwire controller CA")?;
        let (node, node_created) = Authority::open_or_create(
            dir,
            NODE_CA_CERT_FILE,
            NODE_CA_KEY_FILE,
            "fleetwire node CA",
        )?;
        match (created, node_created) {
            (true, _) => tracing::info!(dir = %dir.display(), "fleet CAs created"),
            (false, true) => tracing::warn!(
                dir = %dir.display(),
                "created the node CA ({NODE_CA_CERT_FILE}): node certificates are issued by it from now on, and {CA_CERT_FILE} signs only the controller's; certificates nodes hold from {CA_CERT_FILE} are taken until they are renewed"
            ),
            (false, false) => {}
        }
        Ok(FleetCa {
            controller,
            node,
            validity,
            controller_validity: CONTROLLER_CERT_VALIDITY,
            controller_ips: Vec::new(),
            controller_dns: Vec::new(),
            legacy_until: None,
            dir: dir.to_path_buf(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The fleet CA: the controller CA's certificate, which operators and nodes trust.
    pub fn ca_pem(&self) -> &str {
        &self.controller.pem
    }

    /// The node CA's certificate.
    pub fn node_ca_pem(&self) -> &str {
        &self.node.pem
    }

    /// What the controller trusts a node's certificate from now: the node CA, and while the
    /// window of [`FleetCa::with_legacy_until`] is open, the controller CA for certificates
    /// issued before the node CA existed (a node's current serial is checked on every
    /// request, so a renewal retires them).
    pub fn node_trust_pem(&self) -> String {
        match self.legacy_trust() {
            Some((legacy, until)) if SystemTime::now() < until => {
                format!("{}{legacy}", self.node.pem)
            }
            _ => self.node.pem.clone(),
        }
    }

    /// The controller CA's certificate and the end of its window for node certificates, for
    /// a server that checks the date on each handshake (`tls_server::server_config`). `None`
    /// when there is no window, or when the node CA is the controller CA (a CA directory of a
    /// release of one CA, where the node CA's trust takes them all).
    pub fn legacy_trust(&self) -> Option<(&str, SystemTime)> {
        let until = self.legacy_until?;
        (self.node.pem != self.controller.pem).then_some((self.controller.pem.as_str(), until))
    }

    /// Takes node certificates of the controller CA until `until` (the store's
    /// `node_legacy_until`, `store::fleet_ca`): by then every one a release of one CA issued
    /// has ended. `None`: never.
    pub fn with_legacy_until(mut self, until: Option<SystemTime>) -> FleetCa {
        self.legacy_until = until;
        self
    }

    /// The same CAs, never naming an address of `names` (the controller's server
    /// certificate's) in a node certificate, nor taking a DNS name of `tls_names`
    /// (`--tls-name`) as a node id.
    pub fn with_controller_names(mut self, names: &[ServerName], tls_names: &[String]) -> FleetCa {
        self.controller_ips = names
            .iter()
            .filter_map(|name| match name {
                ServerName::Ip(ip) => Some(*ip),
                ServerName::Dns(_) => None,
            })
            .collect();
        self.controller_dns = tls_names
            .iter()
            .filter(|name| name.parse::<IpAddr>().is_err())
            .cloned()
            .collect();
        self
    }

    /// Whether `node_id` is a DNS name `--tls-name` gave the controller's server certificate:
    /// refused as a node id (`localhost` is refused as every reserved id is). This host's own
    /// name is not: a fleet of one (`fleetwire up`) names its node after the host, and no
    /// operator's trust anchor validates a node certificate, whatever it names.
    pub fn is_controller_name(&self, node_id: &str) -> bool {
        self.controller_dns
            .iter()
            .any(|name| name.eq_ignore_ascii_case(node_id))
    }

    /// The SHA-256 of the fleet CA certificate's DER, as `openssl x509 -fingerprint -sha256`
    /// writes it: for an operator to check the CA a node was given.
    pub fn fingerprint_sha256(&self) -> String {
        fingerprint(&self.controller.pem)
    }

    /// The node CA's, as [`FleetCa::fingerprint_sha256`].
    pub fn node_fingerprint_sha256(&self) -> String {
        fingerprint(&self.node.pem)
    }

    /// Whether a node certificate may name `ip`: not loopback, not unspecified, not one of the
    /// controller's own addresses, so that it can never pass for the controller by address.
    fn may_name(&self, ip: Ipv4Addr) -> bool {
        !ip.is_loopback() && !ip.is_unspecified() && !self.controller_ips.contains(&IpAddr::V4(ip))
    }

    /// Signs `csr_pem`'s public key for `node_id`, valid for `wg_ip` and `addresses` only.
    pub fn sign(
        &self,
        csr_pem: &str,
        node_id: &str,
        wg_ip: Ipv4Addr,
        addresses: &[Ipv4Addr],
    ) -> Result<IssuedCert, CsrRejected> {
        // One parse of the PEM for every check and for the key signed, so the key whose
        // strength is checked is the key certified.
        let (_, pem) = x509_parser::pem::parse_x509_pem(csr_pem.as_bytes())
            .map_err(|e| CsrRejected::Unusable(e.to_string()))?;
        if pem.label != "CERTIFICATE REQUEST" {
            return Err(CsrRejected::Unusable(format!(
                "a PEM block of {:?}, not CERTIFICATE REQUEST",
                pem.label
            )));
        }
        // The key first: ring verifies no RSA signature under 2048 bits, so a weak key would
        // otherwise be reported as a bad signature.
        let spki = check_key_strength(&pem.contents)?;
        // The signature is verified against the request's own key.
        CertificateSigningRequestParams::from_der(&pem.contents.as_slice().into()).map_err(
            |e| match e {
                rcgen::Error::InvalidCertificationRequestSignature => CsrRejected::BadSignature,
                e => CsrRejected::Unusable(e.to_string()),
            },
        )?;
        // The certificate's key is the request's key info as it stands: rcgen's request
        // parser names the key's algorithm after the request's signature algorithm, which
        // turned a P-384 key signed with SHA-256 into a P-384 point labelled P-256
        // (docs/reliability/parser-fuzz.md).
        let public_key = rcgen::SubjectPublicKeyInfo::from_der(&spki)
            .map_err(|e| CsrRejected::WeakKey(format!("a key rcgen cannot certify: {e}")))?;
        // Everything but the public key is ours to decide.
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        name.push(DnType::OrganizationName, NODE_ORGANIZATION);
        // X.509 bounds a common name to 64 characters (RFC 5280's ub-common-name) and node ids
        // reach 253: a longer id is named by its DNS SAN alone, which is what TLS checks.
        if node_id.chars().count() <= 64 {
            name.push(DnType::CommonName, node_id);
        }
        params.distinguished_name = name;
        let mut sans =
            vec![SanType::DnsName(node_id.to_string().try_into().map_err(
                |e: rcgen::Error| CsrRejected::NodeIdNotDns(e.to_string()),
            )?)];
        // The controller calls a node at its record's address and checks the certificate by
        // the node id (`fleet_tls_client`), so an address left out costs the node nothing.
        let mut ips = Vec::new();
        for ip in std::iter::once(&wg_ip).chain(addresses) {
            if !ips.contains(ip) && self.may_name(*ip) {
                ips.push(*ip);
            }
        }
        sans.extend(ips.into_iter().map(|ip| SanType::IpAddress(IpAddr::V4(ip))));
        params.subject_alt_names = sans;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - backdate(self.validity);
        params.not_after = now + self.validity;
        let (serial, serial_hex) = random_serial();
        params.serial_number = Some(serial);
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&public_key, &self.node.issuer)
            .map_err(|e| CsrRejected::Signing(e.to_string()))?;
        let not_after = chrono::DateTime::from_timestamp(params.not_after.unix_timestamp(), 0)
            .expect("a representable time");
        Ok(IssuedCert {
            cert_pem: format!("{}{}", cert.pem(), self.node.pem),
            ca_pem: self.controller.pem.clone(),
            serial_hex,
            not_after,
        })
    }
}

/// One of the controller's own certificates and its key, both PEM; kept in memory only.
pub struct ControllerIdentity {
    pub cert_pem: String,
    pub key_pem: String,
    pub not_before: std::time::SystemTime,
    pub not_after: std::time::SystemTime,
}

/// How long the controller's own certificates last by default (`--own-cert-validity`); they
/// are renewed at two thirds of it (`controller::trust::own_certs`), so a controller running for
/// years never serves an expired one.
pub const CONTROLLER_CERT_VALIDITY: Duration = Duration::from_secs(30 * 24 * 3600);

impl FleetCa {
    /// The same CAs, issuing the controller's own certificates for `validity`.
    pub fn with_controller_validity(mut self, validity: Duration) -> FleetCa {
        self.controller_validity = validity;
        self
    }

    /// A fresh key and a client-only certificate for it: the controller's identity towards the
    /// agents it calls and the runtimes it probes.
    pub fn issue_controller_client(&self) -> anyhow::Result<ControllerIdentity> {
        self.issue_controller(
            vec![ExtendedKeyUsagePurpose::ClientAuth],
            Vec::new(),
            "the controller's client certificate",
        )
    }

    /// A fresh key and the controller's HTTPS server certificate, valid for `names` (DNS names
    /// and IP addresses the agents and operators reach it by).
    pub fn issue_controller_server(
        &self,
        names: &[ServerName],
    ) -> anyhow::Result<ControllerIdentity> {
        let sans = names
            .iter()
            .map(|name| match name {
                ServerName::Ip(ip) => Ok(SanType::IpAddress(*ip)),
                ServerName::Dns(dns) => Ok(SanType::DnsName(
                    dns.clone()
                        .try_into()
                        .with_context(|| format!("{dns:?} as a DNS name"))?,
                )),
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        self.issue_controller(
            vec![ExtendedKeyUsagePurpose::ServerAuth],
            sans,
            "the controller's server certificate",
        )
    }

    fn issue_controller(
        &self,
        usages: Vec<ExtendedKeyUsagePurpose>,
        sans: Vec<SanType>,
        what: &'static str,
    ) -> anyhow::Result<ControllerIdentity> {
        let key = KeyPair::generate().with_context(|| format!("generating the key of {what}"))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, CONTROLLER_ORGANIZATION);
        dn.push(DnType::CommonName, "fleetwire controller");
        params.distinguished_name = dn;
        params.subject_alt_names = sans;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = usages;
        let now = OffsetDateTime::now_utc();
        let validity =
            time::Duration::try_from(self.controller_validity).context("certificate validity")?;
        params.not_before = now - backdate(validity);
        params.not_after = now + validity;
        params.serial_number = Some(random_serial().0);
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&key, &self.controller.issuer)
            .with_context(|| format!("signing {what}"))?;
        Ok(ControllerIdentity {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            not_before: params.not_before.into(),
            not_after: params.not_after.into(),
        })
    }
}

/// A name the controller's server certificate is valid for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerName {
    Dns(String),
    Ip(IpAddr),
}

impl std::fmt::Display for ServerName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerName::Dns(name) => f.write_str(name),
            ServerName::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

impl std::str::FromStr for ServerName {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<ServerName, Self::Err> {
        Ok(match text.parse::<IpAddr>() {
            Ok(ip) => ServerName::Ip(ip),
            Err(_) => ServerName::Dns(text.to_string()),
        })
    }
}

/// The smallest RSA modulus the CA signs for (NIST SP 800-57's floor past 2030 is 2048).
const MIN_RSA_BITS: usize = 2048;

/// Refuses keys too weak to stand for a node: RSA under [`MIN_RSA_BITS`], elliptic curves
/// other than P-256 and P-384, and anything but RSA, ECDSA and Ed25519. Returns the DER of
/// the request's key info.
fn check_key_strength(csr_der: &[u8]) -> Result<Vec<u8>, CsrRejected> {
    let (_, csr) = x509_parser::certification_request::X509CertificationRequest::from_der(csr_der)
        .map_err(|e| CsrRejected::Unusable(e.to_string()))?;
    let spki = &csr.certification_request_info.subject_pki;
    let strong = || Ok(spki.raw.to_vec());
    match spki.parsed() {
        Ok(PublicKey::RSA(rsa)) if rsa.key_size() >= MIN_RSA_BITS => strong(),
        Ok(PublicKey::RSA(rsa)) => Err(CsrRejected::WeakKey(format!(
            "an RSA key of {} bits (at least {MIN_RSA_BITS})",
            rsa.key_size()
        ))),
        Ok(PublicKey::EC(_)) => {
            let curve = spki
                .algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.as_oid().ok());
            let p256 = x509_parser::oid_registry::OID_EC_P256;
            let p384 = x509_parser::oid_registry::OID_NIST_EC_P384;
            match curve {
                Some(oid) if oid == p256 || oid == p384 => strong(),
                other => Err(CsrRejected::WeakKey(format!(
                    "an elliptic-curve key on {} (P-256 or P-384 only)",
                    other.map_or("an unnamed curve".to_string(), |o| o.to_id_string())
                ))),
            }
        }
        Ok(PublicKey::Unknown(_))
            if spki.algorithm.algorithm == x509_parser::oid_registry::OID_SIG_ED25519 =>
        {
            strong()
        }
        Ok(_) | Err(_) => Err(CsrRejected::WeakKey(
            "not an RSA, ECDSA (P-256, P-384) or Ed25519 key".to_string(),
        )),
    }
}

/// 16 random bytes, the first in 0x01..=0x7f so the DER integer is positive and minimal.
fn random_serial() -> (SerialNumber, String) {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] = (bytes[0] & 0x7f).max(1);
    (SerialNumber::from_slice(&bytes), serial_hex(&bytes))
}

/// The SHA-256 of a PEM certificate's DER, colon-separated upper-case hex.
fn fingerprint(pem: &str) -> String {
    let der = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .map(|(_, pem)| pem.contents)
        .unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, &der);
    digest
        .as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    crate::atomic_file::write(path, bytes, 0o644)
        .with_context(|| format!("writing {}", path.display()))
}

/// Writes a secret readable by the owner only: the file is 0600 before it holds the key.
fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    crate::atomic_file::write(path, bytes, 0o600)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use x509_parser::extensions::GeneralName;

    fn csr_asking_for_too_much() -> (String, KeyPair) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["evil.example".to_string()]).unwrap();
        params
            .subject_alt_names
            .push(SanType::IpAddress("1.2.3.4".parse().unwrap()));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "root");
        let csr = params.serialize_request(&key).unwrap();
        (csr.pem().unwrap(), key)
    }

    #[test]
    fn signs_only_the_key_with_our_subject_sans_and_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let ca = FleetCa::open_or_create(&dir.path().join("ca"), Duration::from_secs(86400 * 30))
            .unwrap();
        let (csr, key) = csr_asking_for_too_much();
        let wg: Ipv4Addr = "10.0.0.7".parse().unwrap();
        let extra: Ipv4Addr = "192.168.1.7".parse().unwrap();
        let issued = ca.sign(&csr, "node-7", wg, &[extra, wg]).unwrap();
        assert!(issued.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(issued.serial_hex.len(), 32);

        let (_, pem) = x509_parser::pem::parse_x509_pem(issued.cert_pem.as_bytes()).unwrap();
        let cert = pem.parse_x509().unwrap();
        let cn: Vec<_> = cert
            .subject()
            .iter_common_name()
            .map(|c| c.as_str().unwrap().to_string())
            .collect();
        assert_eq!(cn, vec!["node-7"]);
        assert_eq!(
            cert.issuer()
                .iter_common_name()
                .next()
                .unwrap()
                .as_str()
                .unwrap(),
            "fleetwire node CA"
        );
        let bc = cert.basic_constraints().unwrap().map(|b| b.value.ca);
        assert_ne!(bc, Some(true), "never a CA");
        let sans = cert.subject_alternative_name().unwrap().unwrap();
        let names: Vec<String> = sans
            .value
            .general_names
            .iter()
            .map(|name| match name {
                GeneralName::DNSName(dns) => dns.to_string(),
                GeneralName::IPAddress(bytes) => {
                    Ipv4Addr::from(<[u8; 4]>::try_from(*bytes).unwrap()).to_string()
                }
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(names.iter().any(|n| n.contains("node-7")));
        assert!(names.iter().any(|n| n.contains("10.0.0.7")));
        assert!(names.iter().any(|n| n.contains("192.168.1.7")));
        assert!(!names
            .iter()
            .any(|n| n.contains("evil") || n.contains("1.2.3.4")));
        let lifetime =
            cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
        assert!(lifetime <= 86400 * 30 + 600, "{lifetime}");
        assert_eq!(
            format!("{:x}", cert.serial),
            issued.serial_hex.trim_start_matches('0')
        );
        // smolvm serves it and the agent presents it to smolvm: both usages.
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.server_auth && eku.client_auth, "{eku:?}");
        // The certificate carries the CSR's public key.
        assert_eq!(
            cert.public_key().subject_public_key.data.as_ref(),
            key.public_key_raw()
        );

        // Re-opening uses the same CA; serials differ.
        let again =
            FleetCa::open_or_create(&dir.path().join("ca"), Duration::from_secs(3600)).unwrap();
        assert_eq!(again.ca_pem(), ca.ca_pem());
        let second = again.sign(&csr, "node-7", wg, &[]).unwrap();
        assert_ne!(second.serial_hex, issued.serial_hex);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("ca/ca.key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "the CA key is private");
        }
    }

    #[test]
    fn the_controller_client_certificate_is_for_client_auth_only_and_chains_to_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        let ca = FleetCa::open_or_create(dir.path(), Duration::from_secs(3600)).unwrap();
        let me = ca.issue_controller_client().unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(me.cert_pem.as_bytes()).unwrap();
        let cert = pem.parse_x509().unwrap();
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth && !eku.server_auth, "{eku:?}");
        assert_ne!(
            cert.basic_constraints().unwrap().map(|b| b.value.ca),
            Some(true)
        );
        let (_, ca_pem) = x509_parser::pem::parse_x509_pem(ca.ca_pem().as_bytes()).unwrap();
        let ca_cert = ca_pem.parse_x509().unwrap();
        assert_eq!(cert.issuer(), ca_cert.subject());
        assert!(me.key_pem.contains("PRIVATE KEY"));
    }

    #[test]
    fn a_short_lived_certificate_is_backdated_by_a_tenth_of_its_life_at_most() {
        let dir = tempfile::tempdir().unwrap();
        let ca = FleetCa::open_or_create(dir.path(), Duration::from_secs(30)).unwrap();
        let (csr, _key) = csr_asking_for_too_much();
        let issued = ca
            .sign(&csr, "n", "10.0.0.1".parse().unwrap(), &[])
            .unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(issued.cert_pem.as_bytes()).unwrap();
        let cert = pem.parse_x509().unwrap();
        let lifetime =
            cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
        assert!((30..=34).contains(&lifetime), "{lifetime}");
    }

    #[test]
    fn a_creation_stopped_after_the_key_is_finished_with_that_key() {
        let dir = tempfile::tempdir().unwrap();
        let first = FleetCa::open_or_create(dir.path(), Duration::from_secs(3600)).unwrap();
        let key = std::fs::read_to_string(dir.path().join(CA_KEY_FILE)).unwrap();
        std::fs::remove_file(dir.path().join(CA_CERT_FILE)).unwrap();
        let again = FleetCa::open_or_create(dir.path(), Duration::from_secs(3600)).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join(CA_KEY_FILE)).unwrap(),
            key
        );
        assert_ne!(again.ca_pem(), first.ca_pem(), "a new certificate");
        let reopened = FleetCa::open_or_create(dir.path(), Duration::from_secs(3600)).unwrap();
        assert_eq!(reopened.ca_pem(), again.ca_pem());
    }

    #[test]
    fn a_weak_key_is_refused_and_a_strong_rsa_key_signed() {
        let dir = tempfile::tempdir().unwrap();
        let ca = FleetCa::open_or_create(dir.path(), Duration::from_secs(3600)).unwrap();
        let wg: Ipv4Addr = "10.0.0.1".parse().unwrap();
        // Made with `openssl req -new -newkey rsa:1024` (ring makes no RSA keys).
        let weak = include_str!("../../../testdata/rsa-1024.csr.pem");
        assert!(matches!(
            ca.sign(weak, "n", wg, &[]),
            Err(CsrRejected::WeakKey(why)) if why.contains("1024")
        ));
        let strong = include_str!("../../../testdata/rsa-2048.csr.pem");
        ca.sign(strong, "n", wg, &[]).unwrap();
    }

    #[test]
    fn a_p384_key_in_a_request_signed_with_sha256_is_certified_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let ca = FleetCa::open_or_create(dir.path(), Duration::from_secs(3600)).unwrap();
        // Made with `openssl req -new -sha256` on a P-384 key; found by the CSR fuzz target.
        let csr_pem = include_str!("../../../testdata/p384-sha256.csr.pem");
        let issued = ca
            .sign(csr_pem, "n", "10.0.0.1".parse().unwrap(), &[])
            .unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(issued.cert_pem.as_bytes()).unwrap();
        let cert = pem.parse_x509().unwrap();
        let (_, csr_pem) = x509_parser::pem::parse_x509_pem(csr_pem.as_bytes()).unwrap();
        let (_, csr) = x509_parser::certification_request::X509CertificationRequest::from_der(
            &csr_pem.contents,
        )
        .unwrap();
        assert_eq!(
            cert.public_key().raw,
            csr.certification_request_info.subject_pki.raw
        );
    }

    #[test]
    fn a_request_in_a_pem_block_of_another_kind_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ca = FleetCa::open_or_create(dir.path(), Duration::from_secs(3600)).unwrap();
        let (csr, _key) = csr_asking_for_too_much();
        let relabelled = csr.replace("CERTIFICATE REQUEST", "PUBLIC KEY");
        let refused = ca
            .sign(&relabelled, "n", "10.0.0.1".parse().unwrap(), &[])
            .unwrap_err();
        assert!(
            matches!(&refused, CsrRejected::Unusable(why) if why.contains("PUBLIC KEY")),
            "{refused}"
        );
    }

    #[test]
    fn refuses_what_is_not_a_csr() {
        let dir = tempfile::tempdir().unwrap();
        let ca = FleetCa::open_or_create(dir.path(), Duration::from_secs(3600)).unwrap();
        let bogus =
            "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n";
        assert!(ca
            .sign(bogus, "n", "10.0.0.1".parse().unwrap(), &[])
            .is_err());
    }

    #[test]
    fn a_node_id_past_64_characters_is_named_by_its_dns_san_alone() {
        let dir = tempfile::tempdir().unwrap();
        let ca =
            FleetCa::open_or_create(&dir.path().join("ca"), Duration::from_secs(86400)).unwrap();
        let (csr, _key) = csr_asking_for_too_much();
        let node_id = format!("gpu-01.{}.example.org", "dc".repeat(40));
        assert!(node_id.len() > 64);
        let issued = ca
            .sign(&csr, &node_id, "10.0.0.7".parse().unwrap(), &[])
            .unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(issued.cert_pem.as_bytes()).unwrap();
        let cert = pem.parse_x509().unwrap();
        assert_eq!(cert.subject().iter_common_name().count(), 0);
        let sans = cert.subject_alternative_name().unwrap().unwrap();
        assert!(sans
            .value
            .general_names
            .iter()
            .any(|name| matches!(name, GeneralName::DNSName(dns) if *dns == node_id)));
    }

    #[test]
    fn the_ca_files_are_written_whole_with_the_key_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let ca = FleetCa::open_or_create(dir.path(), Duration::from_secs(3600)).unwrap();
        let mode = |name: &str| {
            std::fs::metadata(dir.path().join(name))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(CA_KEY_FILE), 0o600);
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                CA_KEY_FILE,
                CA_CERT_FILE,
                NODE_CA_KEY_FILE,
                NODE_CA_CERT_FILE
            ]
        );
        assert_eq!(mode(NODE_CA_KEY_FILE), 0o600);
        let again = FleetCa::open_or_create(dir.path(), Duration::from_secs(3600)).unwrap();
        assert_eq!(again.ca_pem(), ca.ca_pem());
    }

    #[test]
    fn a_node_certificate_names_no_loopback_nor_controller_address_and_only_the_node_ca_validates_it(
    ) {
        let dir = tempfile::tempdir().unwrap();
        let ca = FleetCa::open_or_create(dir.path(), Duration::from_secs(3600))
            .unwrap()
            .with_controller_names(
                &[
                    ServerName::Ip("10.0.0.1".parse().unwrap()),
                    ServerName::Dns("fleet.example".into()),
                ],
                &["fleet.example".into()],
            );
        assert!(ca.is_controller_name("Fleet.Example"));
        assert!(!ca.is_controller_name("n1"));
        let (csr, _key) = csr_asking_for_too_much();
        let issued = ca
            .sign(
                &csr,
                "n1",
                "127.0.0.1".parse().unwrap(),
                &[
                    "0.0.0.0".parse().unwrap(),
                    "10.0.0.1".parse().unwrap(),
                    "10.0.0.9".parse().unwrap(),
                ],
            )
            .unwrap();
        let blocks: Vec<_> = x509_parser::pem::Pem::iter_from_buffer(issued.cert_pem.as_bytes())
            .map(|pem| pem.unwrap())
            .collect();
        assert_eq!(blocks.len(), 2, "the leaf, then the node CA");
        let cert = blocks[0].parse_x509().unwrap();
        let sans = cert.subject_alternative_name().unwrap().unwrap();
        let ips: Vec<_> = sans
            .value
            .general_names
            .iter()
            .filter_map(|name| match name {
                GeneralName::IPAddress(bytes) => {
                    Some(Ipv4Addr::from(<[u8; 4]>::try_from(*bytes).unwrap()).to_string())
                }
                _ => None,
            })
            .collect();
        assert_eq!(ips, ["10.0.0.9"]);
        let node_ca = blocks[1].parse_x509().unwrap();
        assert_eq!(cert.issuer(), node_ca.subject());
        assert_eq!(issued.ca_pem, ca.ca_pem());
        let (_, fleet) = x509_parser::pem::parse_x509_pem(ca.ca_pem().as_bytes()).unwrap();
        assert_ne!(cert.issuer(), fleet.parse_x509().unwrap().subject());
        assert_ne!(ca.fingerprint_sha256(), ca.node_fingerprint_sha256());
    }

    #[test]
    fn a_ca_directory_of_one_ca_gets_a_node_ca_and_keeps_its_fleet_ca() {
        let dir = tempfile::tempdir().unwrap();
        let first = FleetCa::open_or_create(dir.path(), Duration::from_secs(3600)).unwrap();
        // What an older release left: ca.pem and ca.key alone.
        std::fs::remove_file(dir.path().join(NODE_CA_CERT_FILE)).unwrap();
        std::fs::remove_file(dir.path().join(NODE_CA_KEY_FILE)).unwrap();
        let migrated = FleetCa::open_or_create(dir.path(), Duration::from_secs(3600)).unwrap();
        assert_eq!(
            migrated.ca_pem(),
            first.ca_pem(),
            "the fleet CA nodes pinned"
        );
        assert!(dir.path().join(NODE_CA_CERT_FILE).exists());
        assert_ne!(migrated.node_ca_pem(), migrated.ca_pem());
        // Node certificates of ca.pem are taken only within the window the store recorded.
        assert_eq!(migrated.node_trust_pem(), migrated.node_ca_pem());
        let open = migrated.with_legacy_until(Some(SystemTime::now() + Duration::from_secs(60)));
        let trust = open.node_trust_pem();
        assert!(trust.contains(open.node_ca_pem()) && trust.contains(open.ca_pem()));
        let closed = open.with_legacy_until(Some(SystemTime::now() - Duration::from_secs(1)));
        assert_eq!(closed.node_trust_pem(), closed.node_ca_pem());
    }
}
