//! The node's identity in the state directory: its private key (`node.key`, 0600, never sent
//! anywhere), the certificate the controller issued for it (`node.crt`) and the fleet CA that
//! signed it (`ca.crt`, pinned: the only CA the agent trusts for the controller once enrolled).
//!
//! Renewal replaces key and certificate together without ever leaving the node without a
//! usable pair (docs/security.md, "Certificate rotation"): the new key is written to
//! `node.key.next` before its CSR is sent; once the controller answered, `node.crt` is
//! replaced, then `node.key.next` is renamed over `node.key`. Each step is atomic, so after a
//! crash the files are in one of three states, each of which [`load`] turns back into a
//! matching pair: the old pair and a spare next key (dropped), the new certificate with the
//! old key and the next key (the rename is finished), or the new pair.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{KeyPair, PublicKeyData};
use rustls::sign::CertifiedKey;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::drivers::driver::ClientTlsFiles;
use crate::file_error::FileError;

pub const KEY_FILE: &str = "node.key";
/// The key of a renewal in progress (see the module's comment).
pub const NEXT_KEY_FILE: &str = "node.key.next";
pub const CERT_FILE: &str = "node.crt";
pub const CA_FILE: &str = "ca.crt";

/// What is wrong with the node's key or certificate files.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// A file of the state directory could not be read or written.
    #[error(transparent)]
    File(#[from] FileError),
    #[error("{}: not a PEM private key: {error}", path.display())]
    NotAKey { path: PathBuf, error: rcgen::Error },
    #[error("generating a node key: {0}")]
    KeyGeneration(rcgen::Error),
    #[error("{what}: not a PEM X.509 certificate: {problem}")]
    NotACertificate { what: String, problem: String },
    #[error("the certificate the controller issued is not for the key this node sent a CSR for")]
    NotForThisKey,
    #[error("the node certificate and key cannot serve TLS: {0}")]
    Tls(#[from] crate::tls_server::TlsSetupError),
    /// The controller's answer names another CA than the one pinned at the first enrollment.
    #[error("the controller sent another fleet CA than the one pinned in {}: refused (a fleet that really changed its CA: check the new one, then remove that file)", pinned.display())]
    CaChanged { pinned: PathBuf },
}

/// The node's identity in the state directory, as the smolvm driver presents it in fleet mode.
pub fn identity_files(state_dir: &Path) -> ClientTlsFiles {
    ClientTlsFiles {
        cert: state_dir.join(CERT_FILE),
        key: state_dir.join(KEY_FILE),
        ca: state_dir.join(CA_FILE),
    }
}

/// The node's private key: read from the state directory, or generated and stored there
/// (mode 0600) on first start. A key file with looser permissions is tightened.
pub fn node_key(state_dir: &Path) -> Result<KeyPair, IdentityError> {
    let path = state_dir.join(KEY_FILE);
    match read_key(&path)? {
        Some(key) => Ok(key),
        None => {
            let key = KeyPair::generate().map_err(IdentityError::KeyGeneration)?;
            crate::atomic_file::write(&path, key.serialize_pem().as_bytes(), 0o600)
                .map_err(FileError::doing("writing", &path))?;
            tracing::info!("generated the node key {}", path.display());
            Ok(key)
        }
    }
}

/// A key file, `None` when there is none; a key readable by others is made 0600 first.
fn read_key(path: &Path) -> Result<Option<KeyPair>, IdentityError> {
    let pem = match std::fs::read_to_string(path) {
        Ok(pem) => pem,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(FileError::doing("reading", path)(e).into()),
    };
    let meta = std::fs::metadata(path).map_err(FileError::doing("reading", path))?;
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!(
            "{}: permissions were {:o}, set to 600",
            path.display(),
            meta.permissions().mode() & 0o777
        );
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(FileError::doing("setting the mode of", path))?;
    }
    KeyPair::from_pem(&pem)
        .map(Some)
        .map_err(|error| IdentityError::NotAKey {
            path: path.to_path_buf(),
            error,
        })
}

fn read_optional(path: &Path) -> Result<Option<String>, IdentityError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(FileError::doing("reading", path)(e).into()),
    }
}

/// When a certificate may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

impl Validity {
    /// When the certificate is renewed (`fleet_identity::renewal_due`: two thirds in).
    pub fn renew_at(&self) -> SystemTime {
        crate::fleet_identity::renewal_due(self.not_before, self.not_after)
    }

    pub fn renewal_due(&self, now: SystemTime) -> bool {
        now >= self.renew_at()
    }

    pub fn expired(&self, now: SystemTime) -> bool {
        now >= self.not_after
    }
}

/// The node certificate, read.
#[derive(Debug, Clone)]
pub struct NodeCert {
    pub pem: String,
    pub validity: Validity,
    /// The subject public key's bits, to tell which key the certificate is for.
    public_key: Vec<u8>,
}

impl NodeCert {
    /// The first certificate of `pem`; `what` names it in errors.
    pub fn parse(pem: &str, what: &str) -> Result<NodeCert, IdentityError> {
        let not_a_certificate = |problem: String| IdentityError::NotACertificate {
            what: what.to_string(),
            problem,
        };
        let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
            .map_err(|e| not_a_certificate(e.to_string()))?;
        let (_, cert) = X509Certificate::from_der(&block.contents)
            .map_err(|e| not_a_certificate(e.to_string()))?;
        let time = |t: x509_parser::time::ASN1Time| {
            let seconds = t.timestamp();
            if seconds >= 0 {
                UNIX_EPOCH + Duration::from_secs(seconds as u64)
            } else {
                UNIX_EPOCH
            }
        };
        Ok(NodeCert {
            pem: pem.to_string(),
            validity: Validity {
                not_before: time(cert.validity().not_before),
                not_after: time(cert.validity().not_after),
            },
            public_key: cert.public_key().subject_public_key.data.to_vec(),
        })
    }

    pub fn is_for(&self, key: &KeyPair) -> bool {
        self.public_key == key.der_bytes()
    }
}

/// The node's key and, once enrolled, its certificate.
pub struct NodeIdentity {
    pub key: KeyPair,
    /// `None` before the first enrollment, or when `node.crt` is not for `node.key`.
    pub cert: Option<NodeCert>,
}

impl NodeIdentity {
    /// The certificate chain and key as rustls serves them (the local API).
    pub fn certified_key(&self) -> Result<Option<Arc<CertifiedKey>>, IdentityError> {
        let Some(cert) = &self.cert else {
            return Ok(None);
        };
        Ok(Some(crate::tls_server::certified_key(
            &cert.pem,
            &self.key.serialize_pem(),
            "the node certificate",
        )?))
    }

    /// The certificate and its key, both PEM, once there is a certificate: the node's TLS
    /// client identity.
    pub fn client_pem(&self) -> Option<(String, String)> {
        self.cert
            .as_ref()
            .map(|cert| (cert.pem.clone(), self.key.serialize_pem()))
    }
}

/// What [`load`] found of an interrupted renewal.
#[derive(Debug, PartialEq, Eq)]
pub enum Recovery {
    /// No renewal was in progress.
    Nothing,
    /// A renewal stopped before its certificate was stored: its key was dropped.
    DroppedUnusedKey,
    /// The new certificate was stored but its key not yet moved into place: moved now.
    FinishedRenewal,
}

/// The identity in `state_dir`, after finishing or undoing an interrupted renewal; the key is
/// generated on first start. A certificate that is not for the key is left out (logged): only
/// a bootstrap token can enroll the node again then.
pub fn load(state_dir: &Path) -> Result<(NodeIdentity, Recovery), IdentityError> {
    let recovery = recover(state_dir)?;
    let key = node_key(state_dir)?;
    let cert_path = state_dir.join(CERT_FILE);
    let cert = match read_certificate(&cert_path)? {
        Some(cert) if cert.is_for(&key) => Some(cert),
        Some(_) => {
            tracing::error!(
                "{} is not the certificate of {}: it is not used; enrolling again needs a bootstrap token (VM_BOOTSTRAP_TOKEN or VM_BOOTSTRAP_TOKEN_FILE)",
                cert_path.display(),
                state_dir.join(KEY_FILE).display()
            );
            None
        }
        None => None,
    };
    Ok((NodeIdentity { key, cert }, recovery))
}

/// The certificate file, `None` when there is none or it cannot be read as one (logged: the
/// node then enrolls again with a bootstrap token rather than not starting at all).
fn read_certificate(path: &Path) -> Result<Option<NodeCert>, IdentityError> {
    let Some(pem) = read_optional(path)? else {
        return Ok(None);
    };
    match NodeCert::parse(&pem, &path.display().to_string()) {
        Ok(cert) => Ok(Some(cert)),
        Err(e) => {
            tracing::error!("{e}: it is not used; enrolling again needs a bootstrap token (VM_BOOTSTRAP_TOKEN or VM_BOOTSTRAP_TOKEN_FILE)");
            Ok(None)
        }
    }
}

/// Brings the files back to a matching pair after a renewal a crash interrupted.
fn recover(state_dir: &Path) -> Result<Recovery, IdentityError> {
    let next_path = state_dir.join(NEXT_KEY_FILE);
    let Some(next) = read_key(&next_path)? else {
        return Ok(Recovery::Nothing);
    };
    let cert_path = state_dir.join(CERT_FILE);
    let cert = read_certificate(&cert_path)?;
    let current = read_key(&state_dir.join(KEY_FILE))?;
    let current_matches = match (&cert, &current) {
        (Some(cert), Some(key)) => cert.is_for(key),
        _ => false,
    };
    if !current_matches && cert.as_ref().is_some_and(|cert| cert.is_for(&next)) {
        promote_next_key(state_dir)?;
        tracing::info!("finished the certificate renewal a stop interrupted");
        return Ok(Recovery::FinishedRenewal);
    }
    std::fs::remove_file(&next_path).map_err(FileError::doing("removing", &next_path))?;
    Ok(Recovery::DroppedUnusedKey)
}

/// Step 1 of a renewal: a new key, kept as `node.key.next` (0600) before its CSR leaves.
pub fn stage_next_key(state_dir: &Path) -> Result<KeyPair, IdentityError> {
    let key = KeyPair::generate().map_err(IdentityError::KeyGeneration)?;
    let path = state_dir.join(NEXT_KEY_FILE);
    crate::atomic_file::write(&path, key.serialize_pem().as_bytes(), 0o600)
        .map_err(FileError::doing("writing", &path))?;
    Ok(key)
}

/// Stores what the controller issued for `key`: the CA (pinned from now on), then the
/// certificate. Refuses a certificate that is not for `key`, so a wrong answer never replaces a
/// working pair.
pub fn store_certificate(
    state_dir: &Path,
    key: &KeyPair,
    cert_pem: &str,
    ca_pem: Option<&str>,
) -> Result<NodeCert, IdentityError> {
    let cert = NodeCert::parse(cert_pem, "the certificate the controller issued")?;
    if !cert.is_for(key) {
        return Err(IdentityError::NotForThisKey);
    }
    if let Some(ca) = ca_pem {
        crate::tls_server::certificates_of(ca, "the CA the controller sent")?;
        let path = state_dir.join(CA_FILE);
        match std::fs::read_to_string(&path) {
            // Pinned at the first enrollment, and never replaced by what an answer says: an
            // answer is only as trustworthy as the CA it came through.
            Ok(pinned) if pinned.trim() == ca.trim() => {}
            Ok(_) => return Err(IdentityError::CaChanged { pinned: path }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                crate::atomic_file::write(&path, ca.as_bytes(), 0o644)
                    .map_err(FileError::doing("storing", &path))?;
            }
            Err(e) => return Err(FileError::doing("reading", &path)(e).into()),
        }
    }
    let path = state_dir.join(CERT_FILE);
    crate::atomic_file::write(&path, cert_pem.as_bytes(), 0o644)
        .map_err(FileError::doing("storing", &path))?;
    Ok(cert)
}

/// The last step of a renewal: `node.key.next` becomes `node.key`.
pub fn promote_next_key(state_dir: &Path) -> Result<(), IdentityError> {
    let next = state_dir.join(NEXT_KEY_FILE);
    let key = state_dir.join(KEY_FILE);
    crate::atomic_file::rename(&next, &key).map_err(FileError::doing("renaming", &next))?;
    Ok(())
}

/// Steps 3 and 4 of a renewal: the issued certificate stored, then its key moved into place.
pub fn commit_renewal(
    state_dir: &Path,
    next_key: KeyPair,
    cert_pem: &str,
    ca_pem: Option<&str>,
) -> Result<NodeIdentity, IdentityError> {
    let cert = store_certificate(state_dir, &next_key, cert_pem, ca_pem)?;
    promote_next_key(state_dir)?;
    Ok(NodeIdentity {
        key: next_key,
        cert: Some(cert),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, IsCa, Issuer};

    fn ca() -> Issuer<'static, KeyPair> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        Issuer::new(params, key)
    }

    fn cert_for(issuer: &Issuer<'static, KeyPair>, key: &KeyPair) -> String {
        CertificateParams::new(vec!["n1".to_string()])
            .unwrap()
            .signed_by(key, issuer)
            .unwrap()
            .pem()
    }

    fn key_file(dir: &Path, name: &str) -> Option<Vec<u8>> {
        let path = dir.join(name);
        path.exists().then(|| {
            KeyPair::from_pem(&std::fs::read_to_string(path).unwrap())
                .unwrap()
                .der_bytes()
                .to_vec()
        })
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_key_is_kept_with_mode_600_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let key = node_key(dir.path()).unwrap();
        assert_eq!(mode(&dir.path().join(KEY_FILE)), 0o600);
        let again = node_key(dir.path()).unwrap();
        assert_eq!(key.der_bytes(), again.der_bytes(), "the same key is reused");
    }

    #[test]
    fn renewal_is_due_two_thirds_into_the_validity_and_expiry_at_its_end() {
        let start = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let v = Validity {
            not_before: start,
            not_after: start + Duration::from_secs(90),
        };
        assert_eq!(v.renew_at(), start + Duration::from_secs(60));
        assert!(!v.renewal_due(start + Duration::from_secs(59)));
        assert!(v.renewal_due(start + Duration::from_secs(60)));
        assert!(!v.expired(start + Duration::from_secs(89)));
        assert!(v.expired(start + Duration::from_secs(90)));
    }

    #[test]
    fn a_certificate_is_read_with_its_validity_and_key() {
        let issuer = ca();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["n1".to_string()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2030, 1, 1);
        params.not_after = rcgen::date_time_ymd(2030, 1, 4);
        let pem = params.signed_by(&key, &issuer).unwrap().pem();
        let cert = NodeCert::parse(&pem, "test").unwrap();
        let day = Duration::from_secs(86_400);
        assert_eq!(
            cert.validity
                .not_after
                .duration_since(cert.validity.not_before)
                .unwrap(),
            3 * day
        );
        assert_eq!(cert.validity.renew_at(), cert.validity.not_before + 2 * day);
        assert!(cert.is_for(&key));
        assert!(!cert.is_for(&KeyPair::generate().unwrap()));
        assert!(matches!(
            NodeCert::parse("no PEM here", "x"),
            Err(IdentityError::NotACertificate { .. })
        ));
    }

    /// The enrolled state every crash test starts from: key A and its certificate.
    fn enrolled(dir: &Path, issuer: &Issuer<'static, KeyPair>) -> KeyPair {
        let (identity, _) = load(dir).unwrap();
        store_certificate(
            dir,
            &identity.key,
            &cert_for(issuer, &identity.key),
            Some("CA"),
        )
        .expect_err("a CA that is not PEM is refused");
        store_certificate(dir, &identity.key, &cert_for(issuer, &identity.key), None).unwrap();
        identity.key
    }

    #[test]
    fn the_ca_is_pinned_once_and_another_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let issuer = ca();
        let (identity, _) = load(dir.path()).unwrap();
        let pem = |issuer: &Issuer<'static, KeyPair>| {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params.self_signed(issuer.key()).unwrap().pem()
        };
        let first = pem(&issuer);
        let cert = cert_for(&issuer, &identity.key);
        store_certificate(dir.path(), &identity.key, &cert, Some(&first)).unwrap();
        store_certificate(dir.path(), &identity.key, &cert, Some(&first)).unwrap();
        let other = pem(&ca());
        assert!(matches!(
            store_certificate(dir.path(), &identity.key, &cert, Some(&other)),
            Err(IdentityError::CaChanged { .. })
        ));
        assert_eq!(
            std::fs::read_to_string(dir.path().join(CA_FILE)).unwrap(),
            first
        );
    }

    #[test]
    fn a_crash_after_staging_the_next_key_keeps_the_old_pair() {
        let dir = tempfile::tempdir().unwrap();
        let issuer = ca();
        let old = enrolled(dir.path(), &issuer);
        let next = stage_next_key(dir.path()).unwrap();
        assert_eq!(mode(&dir.path().join(NEXT_KEY_FILE)), 0o600);
        assert_ne!(next.der_bytes(), old.der_bytes());
        // Crash: the CSR may or may not have left; no certificate was stored.
        let (identity, recovery) = load(dir.path()).unwrap();
        assert_eq!(recovery, Recovery::DroppedUnusedKey);
        assert_eq!(identity.key.der_bytes(), old.der_bytes());
        assert!(identity.cert.unwrap().is_for(&old));
        assert!(!dir.path().join(NEXT_KEY_FILE).exists());
    }

    #[test]
    fn a_crash_after_storing_the_new_certificate_finishes_the_renewal() {
        let dir = tempfile::tempdir().unwrap();
        let issuer = ca();
        enrolled(dir.path(), &issuer);
        let next = stage_next_key(dir.path()).unwrap();
        store_certificate(dir.path(), &next, &cert_for(&issuer, &next), None).unwrap();
        // Crash before the rename: node.crt is for node.key.next.
        let (identity, recovery) = load(dir.path()).unwrap();
        assert_eq!(recovery, Recovery::FinishedRenewal);
        assert_eq!(identity.key.der_bytes(), next.der_bytes());
        assert!(identity.cert.unwrap().is_for(&next));
        assert_eq!(key_file(dir.path(), KEY_FILE).unwrap(), next.der_bytes());
        assert_eq!(mode(&dir.path().join(KEY_FILE)), 0o600);
        assert!(!dir.path().join(NEXT_KEY_FILE).exists());
    }

    #[test]
    fn a_finished_renewal_loads_the_new_pair_and_nothing_is_left_over() {
        let dir = tempfile::tempdir().unwrap();
        let issuer = ca();
        let old = enrolled(dir.path(), &issuer);
        let next = stage_next_key(dir.path()).unwrap();
        let next_der = next.der_bytes().to_vec();
        let cert = cert_for(&issuer, &next);
        let renewed = commit_renewal(dir.path(), next, &cert, None).unwrap();
        assert_eq!(renewed.key.der_bytes(), next_der);
        let (identity, recovery) = load(dir.path()).unwrap();
        assert_eq!(recovery, Recovery::Nothing);
        assert_eq!(identity.key.der_bytes(), next_der);
        assert!(!identity.cert.as_ref().unwrap().is_for(&old));
        assert!(identity.certified_key().unwrap().is_some());
        assert!(identity
            .client_pem()
            .unwrap()
            .1
            .contains("BEGIN PRIVATE KEY"));
    }

    #[test]
    fn a_certificate_for_another_key_is_never_stored() {
        let dir = tempfile::tempdir().unwrap();
        let issuer = ca();
        let old = enrolled(dir.path(), &issuer);
        let next = stage_next_key(dir.path()).unwrap();
        let stranger = KeyPair::generate().unwrap();
        assert!(matches!(
            commit_renewal(dir.path(), next, &cert_for(&issuer, &stranger), None),
            Err(IdentityError::NotForThisKey)
        ));
        let (identity, _) = load(dir.path()).unwrap();
        assert_eq!(identity.key.der_bytes(), old.der_bytes());
        assert!(identity.cert.unwrap().is_for(&old));
    }

    #[test]
    fn a_certificate_that_is_not_for_the_key_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let issuer = ca();
        enrolled(dir.path(), &issuer);
        let stranger = KeyPair::generate().unwrap();
        std::fs::write(dir.path().join(CERT_FILE), cert_for(&issuer, &stranger)).unwrap();
        let (identity, recovery) = load(dir.path()).unwrap();
        assert_eq!(recovery, Recovery::Nothing);
        assert!(identity.cert.is_none());
        // Nor is one that is not a certificate at all; the agent still starts.
        std::fs::write(dir.path().join(CERT_FILE), "garbage").unwrap();
        assert!(load(dir.path()).unwrap().0.cert.is_none());
    }
}
