//! The per-cluster certificate authority and the identities it issues.
//!
//! The host creates a [`ClusterCa`] when it starts. Every member of the cluster (the host and
//! each worker) holds an [`Identity`]: a leaf certificate signed by that CA, its private key, and
//! the CA certificate it trusts. Peers authenticate each other with these (mutual TLS), so a
//! process without a certificate from *this* cluster's CA cannot take part.
//!
//! A leaf's name is both its subject common name and a DNS subject alternative name, so a peer
//! can dial `worker-3` by address and have TLS check that it really reached `worker-3`.
//! Names are therefore restricted to DNS-like names (`[a-z0-9.-]`, not an IP address).

use std::fmt;
use std::fs;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DnType, ExtendedKeyUsagePurpose,
    IsCa, Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SanType, SerialNumber,
};
use ring::rand::SecureRandom;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use time::OffsetDateTime;

/// File names used by [`Identity::save`] / [`Identity::load`] and [`ClusterCa::save`].
pub const CERT_FILE: &str = "cert.pem";
/// The private key of an identity (written with mode 0600).
pub const KEY_FILE: &str = "key.pem";
/// The CA certificate an identity trusts.
pub const CA_CERT_FILE: &str = "ca.pem";
/// The CA's own private key (only in a directory written by [`ClusterCa::save`]).
pub const CA_KEY_FILE: &str = "ca-key.pem";

/// How long a leaf certificate is valid; the cluster CA lives ten times longer.
const LEAF_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// Tolerated clock skew between cluster members.
const BACKDATE: Duration = Duration::from_secs(3600);

/// Errors from the CA and from identity files; file errors name the file and the reason.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// A name that cannot be a certificate name (must be DNS-like).
    #[error("invalid name {name:?}: {reason}")]
    InvalidName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: String,
    },
    /// Certificate generation or signing failed.
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    /// A certificate signing request that could not be parsed or whose signature is wrong.
    #[error("bad certificate signing request: {0}")]
    BadCsr(rcgen::Error),
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file's content is not what was expected.
    #[error("{}: {reason}", path.display())]
    BadFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Certificate, key and CA certificate do not form a valid identity.
    #[error("invalid identity: {0}")]
    BadIdentity(String),
    /// The system random number generator failed.
    #[error("random number generator failed")]
    Random,
}

/// SHA-256 of a CA certificate's DER encoding: what a join token pins.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// Fingerprint of a DER-encoded certificate.
    pub fn of_der(der: &[u8]) -> Self {
        let digest = ring::digest::digest(&ring::digest::SHA256, der);
        let mut out = [0u8; 32];
        out.copy_from_slice(digest.as_ref());
        Fingerprint(out)
    }

    /// Lower-case hex, 64 characters (the same as `Display`).
    pub fn to_hex(&self) -> String {
        crate::token::hex_encode(&self.0)
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint(sha256:{})", self.to_hex())
    }
}

/// Checks that `name` can be a member name: a DNS name that is not an IP address.
pub fn validate_name(name: &str) -> Result<(), CaError> {
    let bad = |reason: &str| CaError::InvalidName { name: name.to_string(), reason: reason.to_string() };
    if name.is_empty() || name.len() > 253 {
        return Err(bad("must be 1 to 253 characters"));
    }
    if name.parse::<IpAddr>().is_ok() {
        return Err(bad("an IP address cannot be a member name"));
    }
    if !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.') {
        return Err(bad("only lower-case letters, digits, '-' and '.' are allowed"));
    }
    rustls::pki_types::DnsName::try_from(name).map_err(|_| bad("not a valid DNS name"))?;
    Ok(())
}

/// A per-cluster certificate authority: issues identities and signs joining workers' CSRs.
pub struct ClusterCa {
    cluster: String,
    cert: CertificateDer<'static>,
    key_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl fmt::Debug for ClusterCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterCa")
            .field("cluster", &self.cluster)
            .field("fingerprint", &self.fingerprint())
            .finish_non_exhaustive()
    }
}

fn random_serial() -> Result<SerialNumber, CaError> {
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new().fill(&mut bytes).map_err(|_| CaError::Random)?;
    bytes[0] &= 0x7f; // positive INTEGER
    bytes[0] |= 0x01; // no leading zero byte
    Ok(SerialNumber::from_slice(&bytes))
}

fn validity(params: &mut CertificateParams, lifetime: Duration) {
    let now = OffsetDateTime::now_utc();
    params.not_before = now - BACKDATE;
    params.not_after = now + lifetime;
}

fn read_file(path: &Path) -> Result<String, CaError> {
    fs::read_to_string(path).map_err(|source| CaError::Io { path: path.to_path_buf(), source })
}

fn write_file(path: &Path, contents: &str, private: bool) -> Result<(), CaError> {
    let io = |source| CaError::Io { path: path.to_path_buf(), source };
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(io)?;
    #[cfg(unix)]
    if private {
        // `mode` only applies when the file is created; tighten an existing one too.
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(fs::Permissions::from_mode(0o600)).map_err(io)?;
    }
    #[cfg(not(unix))]
    let _ = private;
    file.write_all(contents.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)
}

fn create_dir(dir: &Path) -> Result<(), CaError> {
    fs::create_dir_all(dir).map_err(|source| CaError::Io { path: dir.to_path_buf(), source })
}

fn certs_from_pem(path: &Path, text: &str) -> Result<Vec<CertificateDer<'static>>, CaError> {
    let certs = CertificateDer::pem_slice_iter(text.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CaError::BadFile { path: path.to_path_buf(), reason: format!("bad PEM: {e}") })?;
    if certs.is_empty() {
        return Err(CaError::BadFile { path: path.to_path_buf(), reason: "no CERTIFICATE block".into() });
    }
    Ok(certs)
}

/// PEM-encodes a certificate (base64 in 64-column lines).
pub(crate) fn pem_of_der(der: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::with_capacity(der.len().div_ceil(3) * 4);
    for group in der.chunks(3) {
        let n = group.iter().enumerate().fold(0u32, |acc, (i, &b)| acc | (b as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= group.len() {
                b64.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                b64.push('=');
            }
        }
    }
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

impl ClusterCa {
    /// Creates a fresh CA for `cluster_name` (a new P-256 key, valid for ten years).
    pub fn generate(cluster_name: &str) -> Result<Self, CaError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, format!("parcae cluster CA {cluster_name}"));
        params.distinguished_name.push(DnType::OrganizationName, cluster_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.serial_number = Some(random_serial()?);
        validity(&mut params, LEAF_VALIDITY * 10);
        let cert = params.self_signed(&key)?;
        let key_pem = key.serialize_pem();
        Ok(ClusterCa {
            cluster: cluster_name.to_string(),
            cert: cert.der().clone(),
            key_pem,
            issuer: Issuer::new(params, key),
        })
    }

    /// The cluster name given to [`ClusterCa::generate`].
    pub fn cluster_name(&self) -> &str {
        &self.cluster
    }

    /// The CA certificate (DER) that every member trusts.
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert
    }

    /// The CA certificate in PEM.
    pub fn cert_pem(&self) -> String {
        pem_of_der(&self.cert)
    }

    /// SHA-256 of the CA certificate, pinned by join tokens.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of_der(&self.cert)
    }

    fn leaf_params(&self, name: &str, extra_sans: &[&str]) -> Result<CertificateParams, CaError> {
        validate_name(name)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.distinguished_name.push(DnType::OrganizationName, self.cluster.as_str());
        let mut sans = vec![SanType::DnsName(name.try_into()?)];
        for san in extra_sans {
            let san = match san.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => {
                    validate_name(san)?;
                    SanType::DnsName((*san).try_into()?)
                }
            };
            if !sans.contains(&san) {
                sans.push(san);
            }
        }
        params.subject_alt_names = sans;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        // Every member is both a server and a client (workers talk peer to peer).
        params.extended_key_usages =
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(random_serial()?);
        validity(&mut params, LEAF_VALIDITY);
        Ok(params)
    }

    /// Issues a new identity (fresh key) named `name`, valid also for the extra `sans`
    /// (IP addresses or DNS names). Used for the host itself and for locally started workers.
    pub fn issue(&self, name: &str, sans: &[&str]) -> Result<Identity, CaError> {
        let params = self.leaf_params(name, sans)?;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Identity {
            name: name.to_string(),
            chain: vec![cert.der().clone()],
            key: PrivatePkcs8KeyDer::from(key.serialize_der()),
            ca: self.cert.clone(),
        })
    }

    /// Signs a joining worker's CSR (PEM) for `name`; the worker keeps its private key.
    ///
    /// Only the CSR's public key (after checking the CSR's self-signature) is used: the subject,
    /// SANs and usages are chosen here, so a CSR cannot ask for a CA certificate or another name.
    pub fn sign_csr(&self, csr_pem: &str, name: &str) -> Result<CertificateDer<'static>, CaError> {
        let csr = CertificateSigningRequestParams::from_pem(csr_pem).map_err(CaError::BadCsr)?;
        let params = self.leaf_params(name, &[])?;
        let cert = params.signed_by(&csr.public_key, &self.issuer)?;
        Ok(cert.der().clone())
    }

    /// Writes the CA certificate and its private key (mode 0600) into `dir`, so a restarted host
    /// keeps its cluster.
    pub fn save(&self, dir: &Path) -> Result<(), CaError> {
        create_dir(dir)?;
        write_file(&dir.join(CA_CERT_FILE), &self.cert_pem(), false)?;
        write_file(&dir.join(CA_KEY_FILE), &self.key_pem, true)
    }

    /// Loads a CA written by [`ClusterCa::save`].
    pub fn load(dir: &Path) -> Result<Self, CaError> {
        let cert_path = dir.join(CA_CERT_FILE);
        let key_path = dir.join(CA_KEY_FILE);
        let cert_pem = read_file(&cert_path)?;
        let key_pem = read_file(&key_path)?;
        let cert = certs_from_pem(&cert_path, &cert_pem)?.remove(0);
        let key = KeyPair::from_pem(&key_pem).map_err(|e| CaError::BadFile {
            path: key_path.clone(),
            reason: format!("bad private key: {e}"),
        })?;
        let parsed = x509_parser::parse_x509_certificate(&cert)
            .map_err(|e| CaError::BadFile {
                path: cert_path.clone(),
                reason: format!("bad certificate: {e}"),
            })?
            .1;
        if parsed.public_key().raw != key.subject_public_key_info().as_slice() {
            return Err(CaError::BadFile {
                path: key_path,
                reason: format!("private key does not match the certificate in {}", cert_path.display()),
            });
        }
        let cluster = parsed
            .subject()
            .iter_organization()
            .next()
            .and_then(|o| o.as_str().ok())
            .unwrap_or_default()
            .to_string();
        let issuer = Issuer::from_ca_cert_der(&cert, key)
            .map_err(|e| CaError::BadFile { path: cert_path, reason: format!("not a usable CA: {e}") })?;
        Ok(ClusterCa { cluster, cert, key_pem, issuer })
    }
}

/// A member's credentials: leaf certificate chain, private key, and the cluster CA it trusts.
pub struct Identity {
    name: String,
    chain: Vec<CertificateDer<'static>>,
    key: PrivatePkcs8KeyDer<'static>,
    ca: CertificateDer<'static>,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Identity {
            name: self.name.clone(),
            chain: self.chain.clone(),
            key: self.key.clone_key(),
            ca: self.ca.clone(),
        }
    }
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("name", &self.name)
            .field("ca_fingerprint", &self.ca_fingerprint())
            .field("key", &"<redacted>")
            .finish()
    }
}

/// A fresh key pair and a CSR for it: what a joining worker sends, keeping the key.
pub struct CsrRequest {
    /// The CSR in PEM, to send to the host.
    pub csr_pem: String,
    /// The private key (PKCS#8 DER); never leaves the worker.
    pub key: PrivatePkcs8KeyDer<'static>,
}

/// Generates a key pair and a CSR naming `name` (the host decides the final certificate).
pub fn make_csr(name: &str) -> Result<CsrRequest, CaError> {
    validate_name(name)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    let csr = params.serialize_request(&key)?;
    Ok(CsrRequest { csr_pem: csr.pem()?, key: PrivatePkcs8KeyDer::from(key.serialize_der()) })
}

impl Identity {
    /// Assembles an identity from parts (e.g. a signed CSR and the worker's own key), checking
    /// that the key matches the leaf certificate and that the leaf is signed by `ca`.
    pub fn from_parts(
        chain: Vec<CertificateDer<'static>>,
        key: PrivatePkcs8KeyDer<'static>,
        ca: CertificateDer<'static>,
    ) -> Result<Self, CaError> {
        let bad = |reason: String| CaError::BadIdentity(reason);
        let leaf = chain.first().ok_or_else(|| bad("empty certificate chain".into()))?;
        let name =
            cert_name(leaf).ok_or_else(|| bad("leaf certificate has no common name or DNS name".into()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let signer = provider
            .key_provider
            .load_private_key(PrivateKeyDer::Pkcs8(key.clone_key()))
            .map_err(|e| bad(format!("unusable private key: {e}")))?;
        rustls::sign::CertifiedKey::new(chain.clone(), signer)
            .keys_match()
            .map_err(|e| bad(format!("private key does not match the certificate: {e}")))?;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.clone()).map_err(|e| bad(format!("unusable CA certificate: {e}")))?;
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| bad(e.to_string()))?
            .verify_client_cert(leaf, &chain[1..], rustls::pki_types::UnixTime::now())
            .map_err(|e| bad(format!("certificate is not valid under the CA certificate: {e}")))?;
        Ok(Identity { name, chain, key, ca })
    }

    /// The member name (certificate CN and DNS SAN).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The leaf certificate chain presented to peers.
    pub fn cert_chain(&self) -> &[CertificateDer<'static>] {
        &self.chain
    }

    /// The private key.
    pub fn private_key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(self.key.clone_key())
    }

    /// The cluster CA certificate this identity trusts.
    pub fn ca_cert(&self) -> &CertificateDer<'static> {
        &self.ca
    }

    /// SHA-256 of the trusted CA certificate.
    pub fn ca_fingerprint(&self) -> Fingerprint {
        Fingerprint::of_der(&self.ca)
    }

    /// Writes `cert.pem`, `key.pem` (mode 0600) and `ca.pem` into `dir` (created if missing).
    pub fn save(&self, dir: &Path) -> Result<(), CaError> {
        create_dir(dir)?;
        let chain: String = self.chain.iter().map(|c| pem_of_der(c)).collect();
        write_file(&dir.join(CERT_FILE), &chain, false)?;
        let key_pem = rcgen::KeyPair::try_from(&self.key)
            .map_err(|e| CaError::BadFile {
                path: dir.join(KEY_FILE),
                reason: format!("bad private key: {e}"),
            })?
            .serialize_pem();
        write_file(&dir.join(KEY_FILE), &key_pem, true)?;
        write_file(&dir.join(CA_CERT_FILE), &pem_of_der(&self.ca), false)
    }

    /// Loads an identity written by [`Identity::save`]; errors name the file and the reason.
    pub fn load(dir: &Path) -> Result<Self, CaError> {
        let cert_path = dir.join(CERT_FILE);
        let key_path = dir.join(KEY_FILE);
        let ca_path = dir.join(CA_CERT_FILE);
        let chain = certs_from_pem(&cert_path, &read_file(&cert_path)?)?;
        let key_text = read_file(&key_path)?;
        let key = PrivatePkcs8KeyDer::from_pem_slice(key_text.as_bytes()).map_err(|e| CaError::BadFile {
            path: key_path.clone(),
            reason: format!("no PKCS#8 private key: {e}"),
        })?;
        let ca = certs_from_pem(&ca_path, &read_file(&ca_path)?)?.remove(0);
        Identity::from_parts(chain, key, ca).map_err(|e| match e {
            CaError::BadIdentity(reason) => CaError::BadFile {
                path: dir.to_path_buf(),
                reason: format!("{CERT_FILE}, {KEY_FILE} and {CA_CERT_FILE} do not match: {reason}"),
            },
            other => other,
        })
    }
}

/// The member name in a certificate: its subject CN, else its first DNS SAN.
pub fn cert_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    if let Some(cn) = cert.subject().iter_common_name().next().and_then(|cn| cn.as_str().ok()) {
        return Some(cn.to_string());
    }
    let san = cert.subject_alternative_name().ok()??;
    san.value.general_names.iter().find_map(|n| match n {
        x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
        _ => None,
    })
}
