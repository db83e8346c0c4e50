//! Group-secret authentication: a group given a secret (a file of at least 32
//! random bytes, the same at every member and client) admits only processes that
//! hold it.
//!
//! Every control-plane connection (joins, view installation, state transfer,
//! requests, client sessions) starts with a handshake that proves, both ways, that
//! each end holds the secret, without sending it:
//!
//! ```text
//!   initiator -> responder:  "SPAU" | version u8 | nonce_i (32) | name length u8 | identity name
//!   responder -> initiator:  "SPAU" | version u8 | nonce_r (32) | HMAC(secret, "responder" | nonce_i | nonce_r)
//!   initiator -> responder:  HMAC(secret, "initiator" | nonce_i | nonce_r)
//! ```
//!
//! The name is empty for a holder of the group secret (a member, or a client with
//! every right); a client may instead prove a named identity, whose key is
//! derived from the secret ([`Secret::identity`]) and which may only open a client
//! session, with what the application's policy lets it do. Both nonces are fresh
//! random numbers, so a recorded handshake proves nothing on
//! a new connection. Each direction then gets its own key,
//! `HMAC(secret, "key" | direction | nonce_i | nonce_r)`, and every frame's body
//! after the handshake is sealed with AES-256-GCM under it (the frame's sequence
//! number on the connection as the nonce, its header bound to the 16-byte tag): a
//! frame changed, dropped, reordered or replayed (on this connection or another)
//! fails its tag, and the connection is closed before the frame is decoded. Discovery
//! beacons carry a tag of the secret too, over their bytes and the time they were
//! sent (refused beyond [`BEACON_AGE`]).
//!
//! Beacons are tagged, not encrypted. The tcp data plane's links prove the secret at
//! setup and then seal their records with AES-256-GCM (module `link`; see
//! docs/security.md). HMAC-SHA-256 comes from RustCrypto's `hmac` and `sha2`
//! crates, AES-256-GCM (control frames and data links alike) from `aws-lc-rs`; nothing
//! cryptographic is written here.

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use hmac::{Hmac, Mac as _};
use sha2::Sha256;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;
use thiserror::Error;

type HmacSha256 = Hmac<Sha256>;

/// The fewest bytes a secret holds.
pub const MIN_SECRET: usize = 32;
/// The most bytes read from a secret file.
pub const MAX_SECRET: usize = 4096;
/// Handshake magic.
pub const MAGIC: [u8; 4] = *b"SPAU";
/// Handshake version.
const VERSION: u8 = 3;
/// Bytes of a frame's tag.
pub const TAG: usize = 16;
/// How old a discovery beacon may be (by its sender's clock) and still be taken.
pub const BEACON_AGE: Duration = Duration::from_secs(30);
const NONCE: usize = 32;
const FULL: usize = 32;

/// A group's shared secret (see the module docs), or a named identity's key
/// derived from it ([`Secret::identity`]). Its bytes are never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>, Option<String>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.1 {
            None => write!(f, "Secret({} bytes)", self.0.len()),
            Some(n) => write!(f, "Secret(identity {n})"),
        }
    }
}

/// The longest identity name.
pub const MAX_IDENTITY: usize = 64;

/// True for a valid identity name: 1 to [`MAX_IDENTITY`] letters, digits, `.`, `_`
/// or `-`.
pub fn valid_identity(name: &str) -> bool {
    (1..=MAX_IDENTITY).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

/// Why a secret could not be had.
#[derive(Debug, Error)]
pub enum SecretError {
    /// The file could not be read.
    #[error("secret file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Fewer than [`MIN_SECRET`] or more than [`MAX_SECRET`] bytes.
    #[error("a secret of {0} bytes: it needs {MIN_SECRET} to {MAX_SECRET} (e.g. `head -c 32 /dev/urandom > FILE`)")]
    Length(usize),
    /// An identity name that is empty, too long, or has other characters than
    /// letters, digits, `.`, `_` and `-`.
    #[error("identity `{0}`: 1 to 64 letters, digits, '.', '_' or '-'")]
    Identity(String),
}

impl Secret {
    /// A secret of these bytes (at least [`MIN_SECRET`]).
    pub fn from_bytes(bytes: &[u8]) -> Result<Secret, SecretError> {
        if !(MIN_SECRET..=MAX_SECRET).contains(&bytes.len()) {
            return Err(SecretError::Length(bytes.len()));
        }
        Ok(Secret(bytes.to_vec(), None))
    }

    /// The key of identity `name`: derived from this group secret, so that every
    /// member can check it without a list of keys. Give the holder of an identity
    /// this key (its bytes, [`Secret::bytes`]) and its name, never the group
    /// secret; what it may do is the application's policy (DDS: an access
    /// policy), and it can only open client sessions, not join.
    pub fn identity(&self, name: &str) -> Result<Secret, SecretError> {
        if !valid_identity(name) {
            return Err(SecretError::Identity(name.into()));
        }
        Ok(Secret(self.mac(&[b"identity", name.as_bytes()]).to_vec(), Some(name.into())))
    }

    /// This key as the key of identity `name` (a key file made by
    /// [`Secret::identity`], loaded).
    pub fn named(self, name: &str) -> Result<Secret, SecretError> {
        if !valid_identity(name) {
            return Err(SecretError::Identity(name.into()));
        }
        Ok(Secret(self.0, Some(name.into())))
    }

    /// The proof and ciphers of tcp data links for this secret, for a program that
    /// sets up `spindle_sst` tcp transports itself (`TcpConfig::auth`); a Group
    /// does this on its own.
    pub fn link_auth(&self) -> std::sync::Arc<dyn spindle_sst::transport::tcp::LinkAuth> {
        std::sync::Arc::new(LinkProof(self.clone()))
    }

    /// The identity this key is of (`None`: the group secret itself).
    pub fn name(&self) -> Option<&str> {
        self.1.as_deref()
    }

    /// The key's bytes, to write to an identity's key file.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// The secret in file `path` (its bytes as they are). A file others can read
    /// is taken with a warning.
    pub fn load(path: &Path) -> Result<Secret, SecretError> {
        let read = |source| SecretError::Read { path: path.display().to_string(), source };
        let meta = std::fs::metadata(path).map_err(read)?;
        if meta.len() > MAX_SECRET as u64 {
            return Err(SecretError::Length(meta.len() as usize));
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if meta.permissions().mode() & 0o077 != 0 {
                tracing::warn!(path = %path.display(), "the secret file is readable by others: chmod 600 it");
            }
        }
        Secret::from_bytes(&std::fs::read(path).map_err(read)?)
    }

    /// Writes a new secret of 32 random bytes to `path`, readable by its owner only.
    pub fn generate(path: &Path) -> std::io::Result<Secret> {
        let mut b = [0u8; 32];
        random(&mut b)?;
        let s = Secret(b.to_vec(), None);
        s.save(path)?;
        Ok(s)
    }

    /// Writes this key's bytes to a new file `path`, readable by its owner only
    /// (an identity's key file, for its holder).
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        o.open(path)?.write_all(&self.0)
    }

    /// HMAC-SHA-256 of the parts, in order, under this secret.
    pub(crate) fn mac(&self, parts: &[&[u8]]) -> [u8; FULL] {
        let mut m = HmacSha256::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().into()
    }

    /// Whether `tag` is the secret's HMAC of the parts (compared in constant time).
    pub(crate) fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        let mut m = HmacSha256::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        for p in parts {
            m.update(p);
        }
        m.verify_truncated_left(tag).is_ok()
    }

    /// A discovery beacon's tag: over its bytes and the wall-clock second it was
    /// sent.
    pub(crate) fn beacon_tag(&self, bytes: &[u8], sent_s: u64) -> [u8; TAG] {
        let full = self.mac(&[b"beacon", &sent_s.to_le_bytes(), bytes]);
        full[..TAG].try_into().expect("16 bytes")
    }

    /// Whether a beacon's tag holds for its bytes and time.
    pub(crate) fn beacon_ok(&self, bytes: &[u8], sent_s: u64, tag: &[u8]) -> bool {
        tag.len() == TAG && self.verify(&[b"beacon", &sent_s.to_le_bytes(), bytes], tag)
    }
}

/// The key a group's client session tokens are made with: derived from the
/// secret (the same at every member), or, without one, random (the group's
/// founder makes it; joiners get it in their welcome).
pub(crate) fn client_key(secret: Option<&Secret>) -> std::io::Result<[u8; FULL]> {
    match secret {
        Some(s) => Ok(s.mac(&[b"client sessions"])),
        None => {
            let mut k = [0u8; FULL];
            random(&mut k)?;
            Ok(k)
        }
    }
}

/// The token that proves client session `id` at any member of the group.
pub(crate) fn client_token(key: &[u8; FULL], id: u64) -> [u8; TAG] {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    m.update(&id.to_le_bytes());
    m.finalize().into_bytes()[..TAG].try_into().expect("16 bytes")
}

/// Whether `token` proves session `id` (compared in constant time).
pub(crate) fn client_token_ok(key: &[u8; FULL], id: u64, token: &[u8; TAG]) -> bool {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    m.update(&id.to_le_bytes());
    m.verify_truncated_left(token).is_ok()
}

/// A random client session id (never 0).
pub(crate) fn client_id() -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    random(&mut b)?;
    Ok(u64::from_le_bytes(b).max(1))
}

/// Fills `b` with the operating system's random bytes.
pub(crate) fn random(b: &mut [u8]) -> std::io::Result<()> {
    getrandom::fill(b).map_err(|e| std::io::Error::other(e.to_string()))
}

/// Why a connection's handshake failed.
#[derive(Debug, Error)]
pub enum AuthError {
    /// The other end does not hold this group's secret (or holds another).
    #[error("authentication failed: the other end does not hold this group's secret")]
    Failed,
    /// The other end has no secret (none at all, or certificates instead): it
    /// answered without authenticating.
    #[error("authentication failed: the other end has no secret, or takes certificates (it answered in clear)")]
    NoSecretThere,
    /// The other end takes other credentials (a secret where this end has
    /// certificates, or none): it answered in clear.
    #[error("authentication failed: the other end takes other credentials, or none (it answered in clear)")]
    OtherKind,
    /// This end proved an identity that may open client sessions only (a named
    /// identity's key, or a certificate of an identity the group does not list
    /// as a member's), and asked to join.
    #[error("authentication failed: this identity may open client sessions only, not join")]
    ClientOnly,
    /// This end's certificate is revoked by the other end's revocation lists
    /// (the other end refused it).
    #[error("authentication failed: this end's certificate is revoked")]
    Revoked,
    /// This end's certificate has expired (or is not valid yet) by the other
    /// end's clock (the other end refused it).
    #[error("authentication failed: this end's certificate has expired or is not valid yet")]
    Expired,
    /// The other end's certificate is revoked by this end's revocation lists.
    #[error("authentication failed: the other end's certificate is revoked")]
    PeerRevoked,
    /// The other end's certificate has expired (or is not valid yet) by this
    /// end's clock.
    #[error("authentication failed: the other end's certificate has expired or is not valid yet")]
    PeerExpired,
    /// The other end has a secret and this one has none.
    #[error("authentication required: the other end has a secret and this node none")]
    Required,
    /// Something other than a handshake of this version came.
    #[error("not a handshake of version {VERSION}")]
    Malformed,
    /// The connection failed during the handshake.
    #[error("during the handshake: {0}")]
    Io(#[from] std::io::Error),
}

/// One direction of an authenticated connection or a sealed data link: AES-256-GCM
/// under its own key, and the next frame's (or record's) sequence number as the
/// nonce (unique per key, as each direction has its own key).
pub(crate) struct Sealer {
    key: LessSafeKey,
    seq: u64,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sealer(next {})", self.seq)
    }
}

impl Sealer {
    pub(crate) fn new(key: &[u8; FULL]) -> Sealer {
        let key = UnboundKey::new(&AES_256_GCM, key).expect("a 32-byte key is AES-256's");
        Sealer { key: LessSafeKey::new(key), seq: 0 }
    }

    fn nonce(&self) -> Nonce {
        let mut n = [0u8; 12];
        n[..8].copy_from_slice(&self.seq.to_le_bytes());
        Nonce::assume_unique_for_key(n)
    }

    /// Encrypts the next frame's `body` in place, bound to its `header` (sent in
    /// clear); returns the tag that follows the frame.
    pub(crate) fn seal(&mut self, header: &[u8], body: &mut [u8]) -> [u8; TAG] {
        let tag =
            self.key.seal_in_place_separate_tag(self.nonce(), Aad::from(header), body).expect("a frame under 64 GiB");
        self.seq += 1;
        tag.as_ref().try_into().expect("AES-GCM's tag is 16 bytes")
    }

    /// Encrypts the next record, whose body is `first` then `second`, into `out`
    /// (their ciphertext, then the tag), reading neither where it writes: a stable
    /// write's data (a large message, a run of ring slots) is sealed from its region
    /// with no copy first.
    pub(crate) fn seal_into(&mut self, header: &[u8], first: &[u8], second: &[u8], out: &mut [u8]) {
        let (head, rest) = out.split_at_mut(first.len());
        self.key
            .seal_out_of_place_scatter(self.nonce(), Aad::from(header), first, head, second, rest)
            .expect("a record's lengths match its output");
        self.seq += 1;
    }

    /// Decrypts the next frame's `body` in place if `tag` holds for it and its
    /// `header` (constant time); the sequence moves on only if it does.
    pub(crate) fn open(&mut self, header: &[u8], body: &mut [u8], tag: &[u8; TAG]) -> bool {
        let ok = self.key.open_in_place_separate_tag(self.nonce(), Aad::from(header), tag, body).is_ok();
        self.seq += u64::from(ok);
        ok
    }
}

/// The two directions' taggers of an authenticated connection, and (at the
/// responder) the identity the initiator proved (`None`: the group secret) and
/// whether it may act as a member.
#[derive(Debug)]
pub(crate) struct Keys {
    pub(crate) tx: Sealer,
    pub(crate) rx: Sealer,
    pub(crate) peer: Option<String>,
    pub(crate) member: bool,
    /// The certificate chain the peer proved its identity with, if it did.
    pub(crate) chain: Option<std::sync::Arc<tls::PeerChain>>,
}

fn keys(secret: &Secret, ni: &[u8], nr: &[u8], initiator: bool) -> Keys {
    let i2r = secret.mac(&[b"key", b"i2r", ni, nr]);
    let r2i = secret.mac(&[b"key", b"r2i", ni, nr]);
    let (tx, rx) = if initiator { (i2r, r2i) } else { (r2i, i2r) };
    Keys { tx: Sealer::new(&tx), rx: Sealer::new(&rx), peer: None, member: true, chain: None }
}

/// Runs the initiator's side of the handshake on `s`.
pub(crate) fn initiate(s: &mut (impl Read + Write), secret: &Secret) -> Result<Keys, AuthError> {
    let mut ni = [0u8; NONCE];
    random(&mut ni)?;
    let name = secret.name().unwrap_or("").as_bytes();
    let mut hello = Vec::with_capacity(6 + NONCE + name.len());
    hello.extend_from_slice(&MAGIC);
    hello.push(VERSION);
    hello.extend_from_slice(&ni);
    hello.push(name.len() as u8);
    hello.extend_from_slice(name);
    s.write_all(&hello)?;
    let mut head = [0u8; 5];
    s.read_exact(&mut head)?;
    if head[..4] == crate::wire::MAGIC {
        // A member without a secret (or with certificates) answers a handshake
        // with a plain refusal.
        return Err(AuthError::NoSecretThere);
    }
    if head[..4] != MAGIC || head[4] != VERSION {
        return Err(AuthError::Malformed);
    }
    let mut rest = [0u8; NONCE + FULL];
    s.read_exact(&mut rest)?;
    let (nr, tag_r) = rest.split_at(NONCE);
    if !secret.verify(&[b"responder", &ni, nr], tag_r) {
        return Err(AuthError::Failed);
    }
    s.write_all(&secret.mac(&[b"initiator", &ni, nr]))?;
    Ok(keys(secret, &ni, nr, true))
}

/// Runs the responder's side of the handshake on `s`, whose first five bytes
/// (magic and version) were read already.
pub(crate) fn respond(s: &mut (impl Read + Write), group: &Secret, head: [u8; 5]) -> Result<Keys, AuthError> {
    if head[..4] != MAGIC || head[4] != VERSION || group.name().is_some() {
        return Err(AuthError::Malformed);
    }
    let mut ni = [0u8; NONCE];
    s.read_exact(&mut ni)?;
    // An initiator that names an identity proves that identity's key.
    let derived;
    let (secret, peer) = match read_name(s)? {
        None => (group, None),
        Some(name) => {
            derived = group.identity(&name).map_err(|_| AuthError::Malformed)?;
            (&derived, Some(name))
        }
    };
    let mut nr = [0u8; NONCE];
    random(&mut nr)?;
    let mut answer = Vec::with_capacity(5 + NONCE + FULL);
    answer.extend_from_slice(&MAGIC);
    answer.push(VERSION);
    answer.extend_from_slice(&nr);
    answer.extend_from_slice(&secret.mac(&[b"responder", &ni, &nr]));
    s.write_all(&answer)?;
    let mut tag_i = [0u8; FULL];
    s.read_exact(&mut tag_i)?;
    if !secret.verify(&[b"initiator", &ni, &nr], &tag_i) {
        return Err(AuthError::Failed);
    }
    Ok(Keys { member: peer.is_none(), peer, ..keys(secret, &ni, &nr, false) })
}

/// Reads an initiator's name as it precedes its proof (a length byte, then that
/// many bytes of UTF-8); `None` for an empty one.
fn read_name(s: &mut impl Read) -> Result<Option<String>, AuthError> {
    let mut len = [0u8; 1];
    s.read_exact(&mut len)?;
    if len[0] == 0 {
        return Ok(None);
    }
    let mut name = vec![0u8; len[0] as usize];
    s.read_exact(&mut name)?;
    String::from_utf8(name).map(Some).map_err(|_| AuthError::Malformed)
}

/// What a process proves itself with: the group secret (or a named identity's key
/// made from it), or certificates of the group's CA ([`Certificates`], module
/// `tls`).
#[derive(Clone, Debug)]
pub enum Credentials {
    /// A shared secret (see [`Secret`]).
    Secret(Secret),
    /// Certificates (see [`Certificates`]).
    Certificates(std::sync::Arc<Certificates>),
}

impl From<Secret> for Credentials {
    fn from(s: Secret) -> Credentials {
        Credentials::Secret(s)
    }
}

impl From<Certificates> for Credentials {
    fn from(c: Certificates) -> Credentials {
        Credentials::Certificates(std::sync::Arc::new(c))
    }
}

impl Credentials {
    /// The shared secret, if these credentials are one.
    pub fn secret(&self) -> Option<&Secret> {
        match self {
            Credentials::Secret(s) => Some(s),
            Credentials::Certificates(_) => None,
        }
    }

    /// The identity these credentials prove: a named identity's or a
    /// certificate's (`None`: the group secret itself).
    pub fn name(&self) -> Option<&str> {
        match self {
            Credentials::Secret(s) => s.name(),
            Credentials::Certificates(c) => Some(c.name()),
        }
    }

    /// How the tcp data links prove themselves and are keyed: the group secret's
    /// proof, or, with certificates, a TLS handshake per link (module `link`).
    pub(crate) fn link_auth(&self) -> std::sync::Arc<dyn spindle_sst::transport::tcp::LinkAuth> {
        match self {
            Credentials::Secret(s) => s.link_auth(),
            Credentials::Certificates(c) => std::sync::Arc::new(LinkCerts(Certificates::clone(c))),
        }
    }
}

/// Runs the initiator's side of the handshake of these credentials on `s`.
pub(crate) fn initiate_with(s: &mut (impl Read + Write), creds: &Credentials) -> Result<Keys, AuthError> {
    match creds {
        Credentials::Secret(secret) => initiate(s, secret),
        Credentials::Certificates(c) => tls::initiate(s, c, tls::Opens::Control),
    }
}

mod link;
pub(crate) use link::{LinkCerts, LinkProof};
mod revoke;
pub mod tls;
pub use tls::{CertError, Certificates};

#[cfg(test)]
mod tests;
