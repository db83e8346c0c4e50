//! Certificates instead of a shared secret: every member and client holds a
//! certificate of the group's CA, for the identity it names, and the key of it.
//! A control connection then opens with a mutually authenticated TLS 1.3
//! handshake (rustls, with `aws-lc-rs`):
//!
//! ```text
//!   initiator -> responder:  "SPTL" | version u8 | name length u8 | identity name
//!   then a TLS 1.3 handshake, each end presenting its certificate chain
//!   responder -> initiator:  one TLS record of one byte, 1: "your certificate holds"
//! ```
//!
//! Each end checks the other's chain against the CA; the responder also checks
//! that the initiator's certificate is valid for the name it claimed (a DNS name of
//! its subject alternative names). Neither end checks the responder's name: a
//! member is reached by address, and any certificate of the CA is a member's,
//! unless [`Certificates::members`] names who may join. In TLS 1.3 the initiator's
//! handshake ends before the responder has judged its certificate, so the
//! responder confirms it with one byte inside TLS; a refusal reaches the
//! initiator as TLS's alert instead (`certificate revoked`, ...), or as the
//! connection closed, and the initiator says why. With revocation lists
//! ([`Certificates::revocation_list`], module `revoke`) both ends also refuse a
//! revoked certificate.
//!
//! TLS only opens the connection. Both ends then take 64 bytes of the session's
//! exported keying material (RFC 8446 §7.5, label `EXPORTER-spindle-control`, the
//! claimed name as context): the first 32 key the initiator's direction, the last
//! 32 the responder's, and the connection goes on as one authenticated by the
//! group secret does, every frame sealed with AES-256-GCM.
//! So that no byte of those frames is read into rustls's buffers, the handshake
//! reads the stream one TLS record at a time, and the responder sends no session
//! tickets.
//!
//! Each tcp data link opens with the same handshake on its own stream (module
//! `link`), and its keys are exported under the label `EXPORTER-spindle-data-link`
//! with the link's ends as context: every link of every view is keyed by its own
//! key agreement, so a process that was a member once cannot read a later link it
//! records. Client session tokens use a key the group's first member makes at
//! random and every joiner receives in its welcome, over the sealed connection.
//! Discovery beacons are not tagged with certificates: a forged beacon can only
//! point a joiner at a process whose handshake then fails.

use super::revoke::{self, Revocations};
use super::{AuthError, Keys, Sealer};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{
    ClientConfig, ClientConnection, Connection, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    ServerConnection,
};
use spindle_sst::sync::{lock, Mutex};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use thiserror::Error;

/// The magic of a certificate handshake's first bytes.
pub const MAGIC: [u8; 4] = *b"SPTL";
const VERSION: u8 = 2;
/// The byte a responder confirms an initiator's certificate with.
const CONFIRM: u8 = 1;
const EXPORTER: &[u8] = b"EXPORTER-spindle-control";
const LINK_EXPORTER: &[u8] = b"EXPORTER-spindle-data-link";
/// The largest TLS record (2^14 bytes of plaintext, with room for the cipher).
const MAX_RECORD: usize = (1 << 14) + 2048;

/// A member's or client's certificates: the group's CA, its own chain and key,
/// and the identity its certificate names. A clone shares the revocation lists.
#[derive(Clone)]
pub struct Certificates {
    name: String,
    members: Option<Vec<String>>,
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
    /// The revocation lists both verifiers consult, once given.
    revoked: Arc<Slot>,
    /// What a chain is checked against, for [`Certificates::recheck`].
    check: Arc<Chain>,
}

/// The certificate chain an initiator proved its identity with (its own
/// certificate first), kept to be checked again while its session lasts.
pub(crate) struct PeerChain(Vec<CertificateDer<'static>>);

impl std::fmt::Debug for PeerChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PeerChain({} certificates)", self.0.len())
    }
}

/// Where the verifiers find the group's revocation lists, if it has any.
type Slot = Mutex<Option<Arc<Revocations>>>;

impl std::fmt::Debug for Certificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Certificates(identity {})", self.name)
    }
}

/// Why certificates could not be loaded.
#[derive(Debug, Error)]
pub enum CertError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no PEM item of the kind it should.
    #[error("{what}: no PEM {kind} in it")]
    Pem {
        /// Which file (`ca`, `cert` or `key`).
        what: &'static str,
        /// What it should hold.
        kind: &'static str,
    },
    /// The CA certificate is not one rustls takes as a trust anchor.
    #[error("ca: not a usable CA certificate")]
    Ca,
    /// The certificate and key do not go together, or the key's kind is not
    /// supported.
    #[error("cert and key: they do not form a usable pair")]
    Pair,
    /// The revocation list file holds no certificate revocation list, or one
    /// that does not parse.
    #[error("crl: no usable PEM X509 CRL in it")]
    Crl,
    /// The certificate is not valid for the identity named.
    #[error("cert: not valid for identity `{0}` (it must be a DNS name of its subject alternative names)")]
    Name(String),
    /// An identity name that is empty, too long, or has other characters than
    /// letters, digits, `.`, `_` and `-`.
    #[error("identity `{0}`: 1 to 64 letters, digits, '.', '_' or '-'")]
    Identity(String),
}

impl Certificates {
    /// Reads PEM files: `ca` (the group's CA certificate), `cert` (this process's
    /// certificate, then any intermediates) and `key` (its private key), for
    /// identity `name`.
    pub fn load(ca: &Path, cert: &Path, key: &Path, name: &str) -> Result<Certificates, CertError> {
        let read =
            |p: &Path| std::fs::read(p).map_err(|source| CertError::Read { path: p.display().to_string(), source });
        Certificates::from_pem(&read(ca)?, &read(cert)?, &read(key)?, name)
    }

    /// [`Certificates::load`] from the files' bytes.
    pub fn from_pem(ca: &[u8], cert: &[u8], key: &[u8], name: &str) -> Result<Certificates, CertError> {
        if !super::valid_identity(name) {
            return Err(CertError::Identity(name.into()));
        }
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert).filter_map(Result::ok).collect();
        let end = chain.first().ok_or(CertError::Pem { what: "cert", kind: "certificate" })?;
        let key =
            PrivateKeyDer::from_pem_slice(key).map_err(|_| CertError::Pem { what: "key", kind: "private key" })?;
        let mut roots = RootCertStore::empty();
        let mut any = false;
        for c in CertificateDer::pem_slice_iter(ca) {
            let c = c.map_err(|_| CertError::Pem { what: "ca", kind: "certificate" })?;
            roots.add(c).map_err(|_| CertError::Ca)?;
            any = true;
        }
        if !any {
            return Err(CertError::Pem { what: "ca", kind: "certificate" });
        }
        let parsed = ParsedCertificate::try_from(end).map_err(|_| CertError::Pair)?;
        let server_name = ServerName::try_from(name.to_string()).map_err(|_| CertError::Identity(name.into()))?;
        rustls::client::verify_server_name(&parsed, &server_name).map_err(|_| CertError::Name(name.into()))?;

        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let roots = Arc::new(roots);
        let revoked: Arc<Slot> = Arc::new(Mutex::new(None));
        let inner = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|_| CertError::Ca)?;
        let against = || Chain { roots: roots.clone(), provider: provider.clone(), revoked: revoked.clone() };
        let clients = Arc::new(Checked { inner, chain: against() });
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|_| CertError::Pair)?
            .with_client_cert_verifier(clients)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(|_| CertError::Pair)?;
        // Nothing may follow the handshake on the stream but sealed frames.
        server.send_tls13_tickets = 0;
        let client = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|_| CertError::Pair)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly(against())))
            .with_client_auth_cert(chain, key)
            .map_err(|_| CertError::Pair)?;
        Ok(Certificates {
            name: name.into(),
            members: None,
            client: Arc::new(client),
            server: Arc::new(server),
            check: Arc::new(against()),
            revoked,
        })
    }

    /// Consults the certificate revocation lists of a PEM file at every
    /// handshake, at both ends (module `revoke`, and docs/security.md): a certificate a list
    /// revokes is refused, and so is one whose issuer has no list in the file.
    /// The file is read now and again whenever it changes.
    pub fn revocation_list(self, path: &Path) -> Result<Certificates, CertError> {
        let bytes =
            std::fs::read(path).map_err(|source| CertError::Read { path: path.display().to_string(), source })?;
        let lists = Revocations::new(path, &bytes).map_err(|_| CertError::Crl)?;
        *lock(&self.revoked) = Some(Arc::new(lists));
        Ok(self)
    }

    /// Only these identities may join as members; others of the CA may open
    /// client sessions only. Without a list, every certificate of the CA is a
    /// member's.
    pub fn members(mut self, names: Vec<String>) -> Certificates {
        self.members = Some(names);
        self
    }

    /// The identity this process's certificate names.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Checks a chain an initiator proved its identity with again, against the
    /// revocation lists as they are on disk now and the clock as it is now: `Err`
    /// ([`AuthError::PeerRevoked`], [`AuthError::PeerExpired`], or
    /// [`AuthError::Failed`]) if a handshake would refuse it now.
    pub(crate) fn recheck(&self, chain: &PeerChain) -> Result<(), AuthError> {
        let (end, rest) = chain.0.split_first().ok_or(AuthError::Failed)?;
        self.check.check(end, rest, UnixTime::now(), revoke::Usage::Client).map_err(|e| refused(&e))
    }

    /// Whether identity `name` may join as a member.
    pub(crate) fn is_member(&self, name: &str) -> bool {
        self.members.as_ref().map_or(true, |m| m.iter().any(|n| n == name))
    }
}

/// What both verifiers check a chain against: the CA, and the revocation lists
/// once given.
#[derive(Debug)]
struct Chain {
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
    revoked: Arc<Slot>,
}

impl Chain {
    /// The chain of `end` for `usage`, by [`revoke::verify`] (the lists are
    /// taken out of the slot's lock first; reading a changed file is done under
    /// [`Revocations::current`]'s own).
    fn check(
        &self,
        end: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
        usage: revoke::Usage,
    ) -> Result<(), rustls::Error> {
        let algs = self.provider.signature_verification_algorithms.all;
        let lists = lock(&self.revoked).clone();
        revoke::verify(end, intermediates, &self.roots.roots, algs, now, usage, lists.as_deref())
    }
}

/// Verifies a responder's chain against the CA (and the revocation lists), not
/// its name (see the module docs): rustls's own verifier takes a name to check.
#[derive(Debug)]
struct ChainOnly(Chain);

/// rustls's verifier of an initiator's chain, with the chain checked by
/// [`Chain::check`] instead, so that the revocation lists are read as they
/// change.
#[derive(Debug)]
struct Checked {
    inner: Arc<dyn ClientCertVerifier>,
    chain: Chain,
}

impl ClientCertVerifier for Checked {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.chain.check(end_entity, intermediates, now, revoke::Usage::Client)?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.0.check(end_entity, intermediates, now, revoke::Usage::Server)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// A stream read one whole TLS record at a time, so that the handshake never
/// takes into rustls's buffer a byte of what follows it.
struct Records<'a, S> {
    s: &'a mut S,
    buf: Vec<u8>,
    at: usize,
}

impl<S: Read> Read for Records<'_, S> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.at == self.buf.len() {
            let mut head = [0u8; 5];
            self.s.read_exact(&mut head)?;
            if head[..4] == crate::wire::MAGIC {
                // A plain frame: a refusal from a member that takes other
                // credentials or none.
                return Err(std::io::Error::other(Plain));
            }
            let len = u16::from_be_bytes([head[3], head[4]]) as usize;
            if len > MAX_RECORD {
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "a TLS record too long"));
            }
            self.buf.clear();
            self.buf.extend_from_slice(&head);
            self.buf.resize(5 + len, 0);
            self.s.read_exact(&mut self.buf[5..])?;
            self.at = 0;
        }
        let n = out.len().min(self.buf.len() - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl<S: Write> Write for Records<'_, S> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.s.write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.s.flush()
    }
}

/// Drives a handshake to its end, then writes what it still holds.
fn handshake(conn: &mut Connection, s: &mut (impl Read + Write)) -> Result<(), AuthError> {
    let mut io = Records { s, buf: Vec::new(), at: 0 };
    while conn.is_handshaking() {
        conn.complete_io(&mut io).map_err(tls_error)?;
    }
    while conn.wants_write() {
        conn.write_tls(&mut io)?;
    }
    io.flush()?;
    Ok(())
}

/// Sends the responder's confirmation: one byte inside TLS.
fn confirm(conn: &mut Connection, s: &mut (impl Read + Write)) -> Result<(), AuthError> {
    conn.writer().write_all(&[CONFIRM])?;
    let mut io = Records { s, buf: Vec::new(), at: 0 };
    while conn.wants_write() {
        conn.write_tls(&mut io)?;
    }
    io.flush()?;
    Ok(())
}

/// Waits for the responder's confirmation: its byte, or the alert of its
/// refusal, or the connection closed (a refusal after the handshake, e.g. of
/// the identity claimed). Reads one record at a time, so nothing after the
/// confirmation is taken into TLS's buffers.
fn confirmed(conn: &mut Connection, s: &mut (impl Read + Write)) -> Result<(), AuthError> {
    let mut io = Records { s, buf: Vec::new(), at: 0 };
    // A handshake's last flights and a confirmation are a few records; more is
    // a peer that is not confirming.
    for _ in 0..8 {
        match conn.read_tls(&mut io) {
            Ok(0) => return Err(AuthError::Failed),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(AuthError::Failed),
            Err(e) => return Err(tls_error(e)),
        }
        conn.process_new_packets().map_err(|e| tls_error(std::io::Error::other(e)))?;
        let mut b = [0u8; 1];
        match conn.reader().read(&mut b) {
            Ok(1) if b[0] == CONFIRM => return Ok(()),
            Ok(_) => return Err(AuthError::Malformed),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return Err(AuthError::Failed),
        }
    }
    Err(AuthError::Malformed)
}

/// The marker of a plain frame where a TLS record should be.
#[derive(Debug, Error)]
#[error("a plain frame")]
struct Plain;

/// A failed handshake: a certificate refused is a failed authentication (the
/// peer's, refused here; or this end's, refused by the peer's alert); a plain
/// answer, other credentials there; anything else, the connection's own failure.
fn tls_error(e: std::io::Error) -> AuthError {
    match e.get_ref() {
        Some(i) if i.is::<rustls::Error>() => i.downcast_ref::<rustls::Error>().map_or(AuthError::Failed, refused),
        Some(i) if i.is::<Plain>() => AuthError::OtherKind,
        _ => AuthError::Io(e),
    }
}

/// Whose certificate a TLS error refuses, and why: the peer's (checked here), or
/// this end's (the peer's alert).
fn refused(e: &rustls::Error) -> AuthError {
    use rustls::{AlertDescription as A, CertificateError as C};
    match e {
        rustls::Error::InvalidCertificate(C::Revoked) => AuthError::PeerRevoked,
        rustls::Error::InvalidCertificate(C::Expired | C::NotValidYet) => AuthError::PeerExpired,
        rustls::Error::AlertReceived(A::CertificateRevoked) => AuthError::Revoked,
        rustls::Error::AlertReceived(A::CertificateExpired) => AuthError::Expired,
        _ => AuthError::Failed,
    }
}

fn keys(material: &[u8; 64], initiator: bool) -> (Sealer, Sealer) {
    let i2r: [u8; 32] = material[..32].try_into().expect("32 bytes");
    let r2i: [u8; 32] = material[32..].try_into().expect("32 bytes");
    let (tx, rx) = if initiator { (i2r, r2i) } else { (r2i, i2r) };
    (Sealer::new(&tx), Sealer::new(&rx))
}

/// What a handshake opens, and so which keys it exports: a control connection
/// (label `EXPORTER-spindle-control`, the claimed name as context) or a tcp data
/// link (label `EXPORTER-spindle-data-link`, the link's ends as context).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Opens<'a> {
    Control,
    Link(&'a [u8]),
}

impl Opens<'_> {
    fn export(&self, conn: &Connection, name: &[u8]) -> Result<[u8; 64], AuthError> {
        let (label, context) = match self {
            Opens::Control => (EXPORTER, name),
            Opens::Link(ends) => (LINK_EXPORTER, *ends),
        };
        conn.export_keying_material([0u8; 64], label, Some(context)).map_err(|_| AuthError::Failed)
    }
}

/// Runs the initiator's side on `s`, for what it `opens`: claims this process's
/// identity, proves it with its certificate, and checks the responder's chain.
pub(crate) fn initiate(s: &mut (impl Read + Write), certs: &Certificates, opens: Opens) -> Result<Keys, AuthError> {
    let name = certs.name.as_bytes();
    let mut hello = Vec::with_capacity(6 + name.len());
    hello.extend_from_slice(&MAGIC);
    hello.push(VERSION);
    hello.push(name.len() as u8);
    hello.extend_from_slice(name);
    s.write_all(&hello)?;
    // The name given to rustls is never checked (`ChainOnly`); SNI carries it.
    let server = ServerName::try_from("member.spindle").expect("a DNS name");
    let mut conn =
        Connection::from(ClientConnection::new(certs.client.clone(), server).map_err(|_| AuthError::Failed)?);
    handshake(&mut conn, s)?;
    confirmed(&mut conn, s)?;
    let material = opens.export(&conn, name)?;
    let (tx, rx) = keys(&material, true);
    Ok(Keys { tx, rx, peer: None, member: true, chain: None })
}

/// Runs the responder's side on `s`, for what it `opens`, whose first five bytes
/// (magic and version) were read already: the initiator's certificate must be of
/// the CA and valid for the identity it claimed.
pub(crate) fn respond(
    s: &mut (impl Read + Write),
    certs: &Certificates,
    head: [u8; 5],
    opens: Opens,
) -> Result<Keys, AuthError> {
    if head[..4] != MAGIC || head[4] != VERSION {
        return Err(AuthError::Malformed);
    }
    let name = super::read_name(s)?.filter(|n| super::valid_identity(n)).ok_or(AuthError::Malformed)?;
    let mut conn = Connection::from(ServerConnection::new(certs.server.clone()).map_err(|_| AuthError::Failed)?);
    handshake(&mut conn, s)?;
    let chain =
        PeerChain(conn.peer_certificates().unwrap_or_default().iter().map(|c| c.clone().into_owned()).collect());
    let end = chain.0.first().ok_or(AuthError::Failed)?;
    let parsed = ParsedCertificate::try_from(end).map_err(|_| AuthError::Failed)?;
    let claimed = ServerName::try_from(name.clone()).map_err(|_| AuthError::Malformed)?;
    rustls::client::verify_server_name(&parsed, &claimed).map_err(|_| AuthError::Failed)?;
    let material = opens.export(&conn, name.as_bytes())?;
    confirm(&mut conn, s)?;
    let (tx, rx) = keys(&material, false);
    let member = certs.is_member(&name);
    Ok(Keys { tx, rx, peer: Some(name), member, chain: Some(Arc::new(chain)) })
}

#[cfg(test)]
mod tests;
