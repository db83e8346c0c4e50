//! `keys`: the credentials a group is secured with (see docs/security.md): a
//! group secret and named identities' keys made from it, or a CA and the
//! certificates it issues for identities (ECDSA P-256, rcgen), and its revocation
//! list. Files are written new (never over an existing one; the revocation list
//! is replaced whole), keys readable by their owner only.

use crate::out::{CliError, Out};
use clap::Subcommand;
use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, DnType, IsCa, KeyIdMethod, KeyPair,
    KeyUsagePurpose, RevokedCertParams, SerialNumber,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, CertificateRevocationListDer, UnixTime};
use serde_json::json;
use spindle::views::auth::Secret;
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Subcommand, Debug)]
pub enum KeysCmd {
    /// A new group secret (32 random bytes) in FILE.
    Secret {
        /// Where to write it (must not exist).
        file: PathBuf,
    },
    /// The key of identity NAME, made from the group secret, in FILE: give it to a
    /// client that should get only what the access policy grants NAME.
    Identity {
        /// The group's secret file.
        #[arg(long)]
        secret_file: PathBuf,
        /// The identity (letters, digits, '.', '_', '-').
        name: String,
        /// Where to write its key (must not exist).
        file: PathBuf,
    },
    /// A new CA for a group of certificates: DIR/ca.pem (give it to every member
    /// and client) and DIR/ca.key (keep it to issue certificates).
    Ca {
        /// The directory (made if missing; ca.pem and ca.key must not exist).
        dir: PathBuf,
        /// Days the CA is valid.
        #[arg(long, default_value_t = 3650)]
        days: u32,
    },
    /// A certificate of the CA in `--ca-dir` for identity NAME: NAME.pem and
    /// NAME.key in `--out` (default: the CA's directory).
    Issue {
        /// The CA's directory (ca.pem, ca.key).
        #[arg(long)]
        ca_dir: PathBuf,
        /// The identity (a DNS name: letters, digits, '.', '-').
        name: String,
        /// Where to write NAME.pem and NAME.key (must not exist).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Days the certificate is valid.
        #[arg(long, default_value_t = 365)]
        days: u32,
    },
    /// Revokes certificates of the CA in `--ca-dir`: writes DIR/crl.pem anew, a
    /// revocation list of what it revoked before and CERT...; none given, an empty
    /// list (give members `crl_file` before the first revocation). Members read the
    /// file again at their next handshake once it changed: copy it to each.
    Revoke {
        /// The CA's directory (ca.pem, ca.key, and crl.pem if any).
        #[arg(long)]
        ca_dir: PathBuf,
        /// The certificates to revoke (PEM files).
        certs: Vec<PathBuf>,
    },
}

pub fn run(out: &Out, cmd: KeysCmd) -> Result<(), CliError> {
    let wrote = match cmd {
        KeysCmd::Secret { file } => {
            Secret::generate(&file).map_err(|e| CliError::failed(format!("{}: {e}", file.display())))?;
            vec![file]
        }
        KeysCmd::Identity { secret_file, name, file } => {
            let s = Secret::load(&secret_file).map_err(|e| CliError::usage(e.to_string()))?;
            let k = s.identity(&name).map_err(|e| CliError::usage(e.to_string()))?;
            k.save(&file).map_err(|e| CliError::failed(format!("{}: {e}", file.display())))?;
            vec![file]
        }
        KeysCmd::Ca { dir, days } => {
            std::fs::create_dir_all(&dir).map_err(|e| CliError::failed(format!("{}: {e}", dir.display())))?;
            let key = KeyPair::generate().map_err(|e| CliError::failed(format!("a key: {e}")))?;
            let cert =
                ca_params(days).self_signed(&key).map_err(|e| CliError::failed(format!("the CA certificate: {e}")))?;
            let (c, k) = (dir.join("ca.pem"), dir.join("ca.key"));
            none_exist(&[&c, &k])?;
            write_new(&k, key.serialize_pem().as_bytes(), true)?;
            write_new(&c, cert.pem().as_bytes(), false)?;
            vec![c, k]
        }
        KeysCmd::Issue { ca_dir, name, out: to, days } => issue(&ca_dir, &name, to.as_deref(), days)?,
        KeysCmd::Revoke { ca_dir, certs } => vec![revoke(&ca_dir, &certs)?],
    };
    out.emit(
        || wrote.iter().map(|f| format!("wrote {}", f.display())).collect::<Vec<_>>().join("\n"),
        || json!({ "wrote": wrote.iter().map(|f| f.display().to_string()).collect::<Vec<_>>() }),
    );
    Ok(())
}

/// The CA's parameters. An issued certificate names its issuer by this
/// distinguished name and key, so the CA need not be read back to sign.
fn ca_params(days: u32) -> CertificateParams {
    let mut p = CertificateParams::default();
    p.distinguished_name.push(DnType::CommonName, "spindle group CA");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    set_validity(&mut p, days);
    p
}

/// The CA of `ca_dir` to sign with (its certificate made again from its key,
/// see [`ca_params`]).
fn load_ca(ca_dir: &Path) -> Result<(rcgen::Certificate, KeyPair), CliError> {
    let read = |f: &str| {
        let p = ca_dir.join(f);
        std::fs::read_to_string(&p).map_err(|e| CliError::usage(format!("{}: {e}", p.display())))
    };
    let ca_key = KeyPair::from_pem(&read("ca.key")?).map_err(|e| CliError::usage(format!("ca.key: {e}")))?;
    read("ca.pem")?;
    let ca = ca_params(3650).self_signed(&ca_key).map_err(|e| CliError::failed(format!("the CA: {e}")))?;
    Ok((ca, ca_key))
}

fn issue(ca_dir: &Path, name: &str, to: Option<&Path>, days: u32) -> Result<Vec<PathBuf>, CliError> {
    let (ca, ca_key) = load_ca(ca_dir)?;
    let mut p = CertificateParams::new(vec![name.to_string()])
        .map_err(|_| CliError::usage(format!("`{name}` is not a DNS name (letters, digits, '.', '-')")))?;
    p.distinguished_name.push(DnType::CommonName, name);
    set_validity(&mut p, days);
    let key = KeyPair::generate().map_err(|e| CliError::failed(format!("a key: {e}")))?;
    let cert = p.signed_by(&key, &ca, &ca_key).map_err(|e| CliError::failed(format!("the certificate: {e}")))?;
    let dir = to.unwrap_or(ca_dir);
    std::fs::create_dir_all(dir).map_err(|e| CliError::failed(format!("{}: {e}", dir.display())))?;
    let (c, k) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
    none_exist(&[&c, &k])?;
    write_new(&k, key.serialize_pem().as_bytes(), true)?;
    write_new(&c, cert.pem().as_bytes(), false)?;
    Ok(vec![c, k])
}

/// An error if any of `paths` exists, before a pair is written (so that a
/// refusal leaves no half of one).
fn none_exist(paths: &[&Path]) -> Result<(), CliError> {
    match paths.iter().find(|p| p.exists()) {
        Some(p) => Err(CliError::failed(format!("{}: exists; nothing was written", p.display()))),
        None => Ok(()),
    }
}

/// Writes a new file (an existing one is an error); a key readable by its owner only.
fn write_new(path: &Path, bytes: &[u8], secret: bool) -> Result<(), CliError> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, if secret { 0o600 } else { 0o644 });
    o.open(path).and_then(|mut f| f.write_all(bytes)).map_err(|e| CliError::failed(format!("{}: {e}", path.display())))
}

/// Valid from yesterday (clocks differ a little) to `days` from today.
fn set_validity(p: &mut CertificateParams, days: u32) {
    let date = |d: i64| {
        let (y, m, day) = from_today(d);
        rcgen::date_time_ymd(y, m, day)
    };
    (p.not_before, p.not_after) = (date(-1), date(i64::from(days)));
}

/// The calendar date `days` from today (UTC).
fn from_today(days: i64) -> (i32, u8, u8) {
    let today =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| (d.as_secs() / 86_400) as i64);
    civil(today + days)
}

/// The calendar date of day `z` since 1970-01-01 (proleptic Gregorian).
fn civil(z: i64) -> (i32, u8, u8) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    ((yoe + era * 400 + i64::from(m <= 2)) as i32, m, d)
}

// `keys revoke`: the revocation list of a CA made by `keys ca`, in its
// directory's `crl.pem`. Each run writes the list anew, with every serial number
// the old list revoked and those of the certificates given; the file is replaced
// by a rename, so a member reading it never sees half of one.

/// Writes `ca_dir/crl.pem`: the serial numbers its old list revoked and those of
/// `certs` (each a certificate of this CA). Its path.
fn revoke(ca_dir: &Path, certs: &[PathBuf]) -> Result<PathBuf, CliError> {
    let (ca, ca_key) = load_ca(ca_dir)?;
    let path = ca_dir.join("crl.pem");
    let mut serials = revoked_before(&path)?;
    let ca_pem = std::fs::read(ca_dir.join("ca.pem"))
        .map_err(|e| CliError::usage(format!("{}: {e}", ca_dir.join("ca.pem").display())))?;
    let ca_der =
        CertificateDer::from_pem_slice(&ca_pem).map_err(|_| CliError::usage("ca.pem: no certificate in it"))?;
    let anchor = webpki::anchor_from_trusted_cert(&ca_der).map_err(|_| CliError::usage("ca.pem: not a usable CA"))?;
    for c in certs {
        serials.insert(serial_of(c, &anchor)?);
    }
    let (y, m, d) = from_today(0);
    let today = rcgen::date_time_ymd(y, m, d);
    let (y, m, d) = from_today(3650);
    // Nanoseconds since 1970: lists written a moment apart still number apart.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let params = CertificateRevocationListParams {
        this_update: today,
        // Members do not enforce a list's next update (a list stays in force until
        // it is replaced); far off, so other tools do not take it as stale.
        next_update: rcgen::date_time_ymd(y, m, d),
        // Increasing from list to list, as RFC 5280 asks.
        crl_number: SerialNumber::from(now),
        issuing_distribution_point: None,
        revoked_certs: serials
            .into_iter()
            .map(|s| RevokedCertParams {
                serial_number: SerialNumber::from_slice(&s),
                revocation_time: today,
                reason_code: None,
                invalidity_date: None,
            })
            .collect(),
        key_identifier_method: KeyIdMethod::Sha256,
    };
    let crl = params.signed_by(&ca, &ca_key).map_err(|e| CliError::failed(format!("the list: {e}")))?;
    let pem = crl.pem().map_err(|e| CliError::failed(format!("the list: {e}")))?;
    let tmp = ca_dir.join("crl.pem.new");
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut f| f.write_all(pem.as_bytes()).and_then(|_| f.sync_all()))
        .and_then(|_| std::fs::rename(&tmp, &path));
    written.map_err(|e| CliError::failed(format!("{}: {e}", path.display())))?;
    Ok(path)
}

/// The serial numbers `path`'s list revokes (none if there is no file).
fn revoked_before(path: &Path) -> Result<BTreeSet<Vec<u8>>, CliError> {
    let pem = match std::fs::read(path) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(e) => return Err(CliError::failed(format!("{}: {e}", path.display()))),
    };
    let bad = || CliError::failed(format!("{}: not a revocation list; nothing was written", path.display()));
    let mut serials = BTreeSet::new();
    for der in CertificateRevocationListDer::pem_slice_iter(&pem) {
        let der = der.map_err(|_| bad())?;
        let list = webpki::BorrowedCertRevocationList::from_der(der.as_ref()).map_err(|_| bad())?;
        for r in &list {
            serials.insert(r.map_err(|_| bad())?.serial_number.to_vec());
        }
    }
    Ok(serials)
}

/// The serial number of the certificate in `file`, which the CA of `anchor` must
/// have issued (expired or not).
fn serial_of(file: &Path, anchor: &rustls_pki_types::TrustAnchor<'_>) -> Result<Vec<u8>, CliError> {
    let pem = std::fs::read(file).map_err(|e| CliError::usage(format!("{}: {e}", file.display())))?;
    let der = CertificateDer::from_pem_slice(&pem)
        .map_err(|_| CliError::usage(format!("{}: no certificate in it", file.display())))?;
    let cert = webpki::EndEntityCert::try_from(&der)
        .map_err(|_| CliError::usage(format!("{}: not a certificate webpki reads", file.display())))?;
    let issued = cert.verify_for_usage(
        webpki::ALL_VERIFICATION_ALGS,
        std::slice::from_ref(anchor),
        &[],
        UnixTime::now(),
        webpki::KeyUsage::client_auth(),
        None,
        None,
    );
    match issued {
        Ok(_) | Err(webpki::Error::CertExpired { .. } | webpki::Error::CertNotValidYet { .. }) => {
            Ok(cert.serial().to_vec())
        }
        Err(_) => {
            Err(CliError::usage(format!("{}: not a certificate of this CA; nothing was written", file.display())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::civil;

    #[test]
    fn days_become_dates() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(59), (1970, 3, 1));
        assert_eq!(civil(11_016), (2000, 2, 29));
        assert_eq!(civil(20_784), (2026, 11, 27));
        assert_eq!(civil(-1), (1969, 12, 31));
    }
}
