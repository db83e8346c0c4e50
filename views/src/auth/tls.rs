//! Certificates instead of a shared secret: every member and client holds a
//! certificate of the group's CA, for the identity it names, and the key of it.
//! A control connection then opens with a mutually authenticated TLS 1.3
//! handshake (rustls, with `ring`):
//!
//! ```text
//!   initiator -> responder:  "SPTL" | version u8 | name length u8 | identity name
//!   then a TLS 1.3 handshake, each end presenting its certificate chain
//! ```
//!
//! Each end checks the other's chain against the CA; the responder also checks
//! that the initiator's certificate is valid for the name it claimed (a DNS name of
//! its subject alternative names). Neither end checks the responder's name: a
//! member is reached by address, and any certificate of the CA is a member's,
//! unless [`Certificates::members`] names who may join.
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
//! The tcp data plane's links and client session tokens use a key the group's
//! first member makes at random and every joiner receives in its welcome, over the
//! sealed connection (see `Credentials::data_secret` and docs/security.md).
//! Discovery beacons are not tagged with certificates: a forged beacon can only
//! point a joiner at a process whose handshake then fails.

use super::{AuthError, Keys, Sealer};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{
    ClientConfig, ClientConnection, Connection, DigitallySignedStruct, RootCertStore, ServerConfig, ServerConnection,
};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use thiserror::Error;

/// The magic of a certificate handshake's first bytes.
pub const MAGIC: [u8; 4] = *b"SPTL";
const VERSION: u8 = 1;
const EXPORTER: &[u8] = b"EXPORTER-spindle-control";
/// The largest TLS record (2^14 bytes of plaintext, with room for the cipher).
const MAX_RECORD: usize = (1 << 14) + 2048;

/// A member's or client's certificates: the group's CA, its own chain and key,
/// and the identity its certificate names.
pub struct Certificates {
    name: String,
    members: Option<Vec<String>>,
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
}

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

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = Arc::new(roots);
        let clients = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|_| CertError::Ca)?;
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
            .with_custom_certificate_verifier(Arc::new(ChainOnly { roots, provider }))
            .with_client_auth_cert(chain, key)
            .map_err(|_| CertError::Pair)?;
        Ok(Certificates { name: name.into(), members: None, client: Arc::new(client), server: Arc::new(server) })
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

    /// Whether identity `name` may join as a member.
    pub(crate) fn is_member(&self, name: &str) -> bool {
        self.members.as_ref().map_or(true, |m| m.iter().any(|n| n == name))
    }
}

/// Verifies a responder's chain against the CA, not its name (see the module
/// docs): rustls's own verifier takes a name to check.
#[derive(Debug)]
struct ChainOnly {
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
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
        let cert = ParsedCertificate::try_from(end_entity)?;
        let algs = self.provider.signature_verification_algorithms.all;
        rustls::client::verify_server_cert_signed_by_trust_anchor(&cert, &self.roots, intermediates, now, algs)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
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

/// The marker of a plain frame where a TLS record should be.
#[derive(Debug, Error)]
#[error("a plain frame")]
struct Plain;

/// A failed handshake: a certificate refused (here or by the peer's alert) is a
/// failed authentication; a plain answer, other credentials there; anything
/// else, the connection's own failure.
fn tls_error(e: std::io::Error) -> AuthError {
    match e.get_ref() {
        Some(i) if i.is::<rustls::Error>() => AuthError::Failed,
        Some(i) if i.is::<Plain>() => AuthError::OtherKind,
        _ => AuthError::Io(e),
    }
}

fn keys(material: &[u8; 64], initiator: bool) -> (Sealer, Sealer) {
    let i2r: [u8; 32] = material[..32].try_into().expect("32 bytes");
    let r2i: [u8; 32] = material[32..].try_into().expect("32 bytes");
    let (tx, rx) = if initiator { (i2r, r2i) } else { (r2i, i2r) };
    (Sealer::new(&tx), Sealer::new(&rx))
}

/// Runs the initiator's side on `s`: claims this process's identity, proves it
/// with its certificate, and checks the responder's chain.
pub(crate) fn initiate(s: &mut (impl Read + Write), certs: &Certificates) -> Result<Keys, AuthError> {
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
    let material = conn.export_keying_material([0u8; 64], EXPORTER, Some(name)).map_err(|_| AuthError::Failed)?;
    let (tx, rx) = keys(&material, true);
    Ok(Keys { tx, rx, peer: None, member: true })
}

/// Runs the responder's side on `s`, whose first five bytes (magic and version)
/// were read already: the initiator's certificate must be of the CA and valid for
/// the identity it claimed.
pub(crate) fn respond(s: &mut (impl Read + Write), certs: &Certificates, head: [u8; 5]) -> Result<Keys, AuthError> {
    if head[..4] != MAGIC || head[4] != VERSION {
        return Err(AuthError::Malformed);
    }
    let name = super::read_name(s)?.filter(|n| super::valid_identity(n)).ok_or(AuthError::Malformed)?;
    let mut conn = Connection::from(ServerConnection::new(certs.server.clone()).map_err(|_| AuthError::Failed)?);
    handshake(&mut conn, s)?;
    let end = conn.peer_certificates().and_then(|c| c.first()).ok_or(AuthError::Failed)?;
    let parsed = ParsedCertificate::try_from(end).map_err(|_| AuthError::Failed)?;
    let claimed = ServerName::try_from(name.clone()).map_err(|_| AuthError::Malformed)?;
    rustls::client::verify_server_name(&parsed, &claimed).map_err(|_| AuthError::Failed)?;
    let material =
        conn.export_keying_material([0u8; 64], EXPORTER, Some(name.as_bytes())).map_err(|_| AuthError::Failed)?;
    let (tx, rx) = keys(&material, false);
    let member = certs.is_member(&name);
    Ok(Keys { tx, rx, peer: Some(name), member })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{TcpListener, TcpStream};
    use testkit::certs::TestCa;

    fn certs(ca: &TestCa, name: &str) -> Certificates {
        let (a, c, k) = ca.pem(name);
        Certificates::from_pem(a.as_bytes(), c.as_bytes(), k.as_bytes(), name).unwrap()
    }

    /// Runs both sides over loopback; each side's keys or error.
    fn run(init: Certificates, resp: Certificates) -> (Result<Keys, AuthError>, Result<Keys, AuthError>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
            let mut head = [0u8; 5];
            s.read_exact(&mut head).unwrap();
            let k = respond(&mut s, &resp, head);
            if let Ok(k) = &k {
                let mut body = [0u8; 8];
                s.read_exact(&mut body).unwrap();
                let mut tag = [0u8; 16];
                s.read_exact(&mut tag).unwrap();
                let mut rx = k_rx(k);
                assert!(rx.open(b"h", &mut body, &tag), "the first frame after the handshake opens");
                assert_eq!(&body, b"after tl");
            }
            k
        });
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
        let k = initiate(&mut s, &init);
        if let Ok(k) = &k {
            let mut tx = k_tx(k);
            let mut body = *b"after tl";
            let tag = tx.seal(b"h", &mut body);
            // A responder that refused the initiator has closed the connection: the
            // write may fail then, and the responder's result says why.
            let _ = s.write_all(&body).and_then(|_| s.write_all(&tag));
        }
        (k, server.join().unwrap())
    }

    // The tests' copies of a side's ciphers (a Sealer is its key and count).
    fn k_tx(k: &Keys) -> Sealer {
        Sealer { key: clone_key(&k.tx), seq: k.tx.seq }
    }
    fn k_rx(k: &Keys) -> Sealer {
        Sealer { key: clone_key(&k.rx), seq: k.rx.seq }
    }
    fn clone_key(s: &Sealer) -> ring::aead::LessSafeKey {
        s.key.clone()
    }

    #[test]
    fn both_ends_of_the_ca_agree_on_keys_and_the_responder_learns_the_identity() {
        let ca = TestCa::new("unit-1");
        let (i, r) = run(certs(&ca, "node-a"), certs(&ca, "node-b"));
        let (i, r) = (i.unwrap(), r.unwrap());
        assert_eq!(r.peer.as_deref(), Some("node-a"));
        assert!(r.member, "every identity of the CA is a member's without a list");
        assert!(i.member);
    }

    #[test]
    fn another_ca_fails_either_way() {
        let (ca, other) = (TestCa::new("unit-a"), TestCa::new("unit-b"));
        let (i, r) = run(certs(&other, "node-x"), certs(&ca, "node-b"));
        assert!(matches!(i, Err(AuthError::Failed)), "{i:?}");
        assert!(r.is_err());
        let (i, r) = run(certs(&ca, "node-a"), certs(&other, "node-y"));
        assert!(matches!(i, Err(AuthError::Failed)), "{i:?}");
        assert!(r.is_err());
    }

    #[test]
    fn an_identity_the_certificate_does_not_name_fails() {
        let ca = TestCa::new("unit-2");
        let mut liar = certs(&ca, "node-c");
        liar.name = "node-a".into();
        let (_, r) = run(liar, certs(&ca, "node-b"));
        assert!(matches!(r, Err(AuthError::Failed)), "{r:?}");
    }

    #[test]
    fn a_listed_group_makes_other_identities_clients() {
        let ca = TestCa::new("unit-3");
        let resp = certs(&ca, "node-b").members(vec!["node-b".into()]);
        let (_, r) = run(certs(&ca, "dashboard"), resp);
        let r = r.unwrap();
        assert_eq!((r.peer.as_deref(), r.member), (Some("dashboard"), false));
    }

    #[test]
    fn loading_checks_the_files() {
        let ca = TestCa::new("unit-4");
        let (ca_pem, c, k) = ca.pem("node-a");
        let (_, _, other_key) = ca.pem("node-a");
        let load =
            |a: &str, c: &str, k: &str, n: &str| Certificates::from_pem(a.as_bytes(), c.as_bytes(), k.as_bytes(), n);
        assert!(matches!(load(&ca_pem, &c, &k, "node-b"), Err(CertError::Name(_))));
        assert!(matches!(load(&ca_pem, &c, &other_key, "node-a"), Err(CertError::Pair)));
        assert!(matches!(load("", &c, &k, "node-a"), Err(CertError::Pem { what: "ca", .. })));
        assert!(matches!(load(&ca_pem, "", &k, "node-a"), Err(CertError::Pem { what: "cert", .. })));
        assert!(matches!(load(&ca_pem, &c, "", "node-a"), Err(CertError::Pem { what: "key", .. })));
        assert!(matches!(load(&ca_pem, &c, &k, "a b"), Err(CertError::Identity(_))));
        assert!(load(&ca_pem, &c, &k, "node-a").is_ok());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        /// Whatever follows a certificate handshake's magic is refused with a typed
        /// error, never a panic.
        #[test]
        fn any_bytes_after_the_magic_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            static CERTS: std::sync::OnceLock<Certificates> = std::sync::OnceLock::new();
            let certs = CERTS.get_or_init(|| certs(&TestCa::new("unit-fuzz"), "node-b"));
            let mut s = std::io::Cursor::new(bytes);
            let mut head = [0u8; 5];
            head[..4].copy_from_slice(&MAGIC);
            head[4] = VERSION;
            prop_assert!(respond(&mut s, certs, head).is_err());
        }
    }
}
