//! Certificate revocation lists for a group of certificates: a PEM file of CRLs
//! (one per CA of the chains the group takes), given with the certificates and
//! consulted at every handshake, at both ends.
//!
//! The file is read again at the first handshake after it changed (its length or
//! modification time), so an operator revokes a certificate by writing a new list
//! in place (`spindle keys revoke`), without restarting members. While the file
//! cannot be read or holds no valid CRL, every handshake fails: a list that should
//! be there and is not is taken as "status unknown", not as "nothing revoked".
//!
//! Each certificate of a chain, the end entity and any intermediate, must have a
//! CRL of its issuer in the file; one whose issuer has none is refused (the status
//! of a certificate is unknown). A list's next-update time is not enforced: a list
//! stays in force until it is replaced.
//!
//! What a list does not do by itself: a member or client already connected keeps
//! the connections and data links it has until the members' periodic check
//! (`group::recheck`) removes the member or drops the client's session (see
//! docs/security.md).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, TrustAnchor, UnixTime};
use rustls::CertificateError;
use spindle_sst::sync::{lock, Arc, Mutex};
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use webpki::{CertRevocationList, OwnedCertRevocationList};

/// The group's revocation lists, read from their file and read again when it
/// changes.
pub(crate) struct Revocations {
    path: PathBuf,
    cache: Mutex<Cached>,
}

struct Cached {
    /// The file's length and modification time when `lists` was read.
    stamp: Option<(u64, SystemTime)>,
    lists: Arc<Vec<CertRevocationList<'static>>>,
}

impl std::fmt::Debug for Revocations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Revocations({})", self.path.display())
    }
}

/// Why a revocation file could not be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListError {
    /// The file could not be read.
    Read,
    /// It holds no CRL, or one that does not parse.
    Pem,
}

fn stamp(path: &Path) -> Option<(u64, SystemTime)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.len(), m.modified().ok()?))
}

/// The CRLs of a PEM file's bytes (at least one; every one must parse).
pub(crate) fn parse(pem: &[u8]) -> Result<Vec<CertRevocationList<'static>>, ListError> {
    let mut lists = Vec::new();
    for der in CertificateRevocationListDer::pem_slice_iter(pem) {
        let der = der.map_err(|_| ListError::Pem)?;
        let list = OwnedCertRevocationList::from_der(der.as_ref()).map_err(|_| ListError::Pem)?;
        lists.push(CertRevocationList::from(list));
    }
    if lists.is_empty() {
        return Err(ListError::Pem);
    }
    Ok(lists)
}

impl Revocations {
    /// The lists of `path`, whose bytes were read as `bytes` (a file that holds
    /// no valid CRL is refused at start).
    pub(crate) fn new(path: &Path, bytes: &[u8]) -> Result<Revocations, ListError> {
        let at = stamp(path);
        let lists = parse(bytes)?;
        Ok(Revocations { path: path.into(), cache: Mutex::new(Cached { stamp: at, lists: Arc::new(lists) }) })
    }

    /// The lists in force: those last read, or the file's anew if it changed
    /// since. `Err` while the changed file cannot be taken (every handshake
    /// fails then, and the file is tried again at the next).
    pub(crate) fn current(&self) -> Result<Arc<Vec<CertRevocationList<'static>>>, ListError> {
        let mut c = lock(&self.cache);
        let now = stamp(&self.path);
        if now.is_none() || now != c.stamp {
            let bytes = std::fs::read(&self.path).map_err(|_| ListError::Read)?;
            let lists = parse(&bytes)?;
            let changed = c.stamp.is_some();
            (c.stamp, c.lists) = (now, Arc::new(lists));
            if changed {
                tracing::info!(path = %self.path.display(), lists = c.lists.len(), "revocation lists read again");
            }
        }
        Ok(c.lists.clone())
    }
}

/// Which end's certificate is checked: a member answering (the initiator checks
/// it) or the initiator (the responder checks it).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Usage {
    Server,
    Client,
}

/// Checks a chain against the CA and, if the group has revocation lists, against
/// them. Errors are rustls's, so the TLS alert tells the other end why
/// (`certificate revoked`, `certificate expired`, ...).
pub(crate) fn verify(
    end: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    anchors: &[TrustAnchor<'_>],
    algs: &[&dyn rustls::pki_types::SignatureVerificationAlgorithm],
    now: UnixTime,
    usage: Usage,
    revocations: Option<&Revocations>,
) -> Result<(), rustls::Error> {
    let cert = webpki::EndEntityCert::try_from(end).map_err(|_| CertificateError::BadEncoding)?;
    let lists = match revocations {
        None => None,
        Some(r) => Some(r.current().map_err(|e| {
            tracing::warn!(path = %r.path.display(), error = ?e, "revocation lists unreadable: refusing handshakes");
            CertificateError::UnknownRevocationStatus
        })?),
    };
    let refs: Vec<&CertRevocationList<'_>> = lists.iter().flat_map(|l| l.iter()).collect();
    let options = match refs.is_empty() {
        true => None,
        false => Some(webpki::RevocationOptionsBuilder::new(&refs).expect("at least one list").build()),
    };
    let usage = match usage {
        Usage::Server => webpki::KeyUsage::server_auth(),
        Usage::Client => webpki::KeyUsage::client_auth(),
    };
    cert.verify_for_usage(algs, anchors, intermediates, now, usage, options, None).map(|_| ()).map_err(pki_error)
}

/// webpki's verdict as rustls's certificate error (the alert follows from it).
fn pki_error(e: webpki::Error) -> rustls::Error {
    use webpki::Error as E;
    let c = match e {
        E::CertRevoked => CertificateError::Revoked,
        E::UnknownRevocationStatus => CertificateError::UnknownRevocationStatus,
        E::CertExpired { .. } => CertificateError::Expired,
        E::CertNotValidYet { .. } => CertificateError::NotValidYet,
        E::UnknownIssuer => CertificateError::UnknownIssuer,
        E::InvalidSignatureForPublicKey => CertificateError::BadSignature,
        E::RequiredEkuNotFoundContext(_) => CertificateError::InvalidPurpose,
        _ => CertificateError::ApplicationVerificationFailure,
    };
    rustls::Error::InvalidCertificate(c)
}
