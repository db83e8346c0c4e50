//! `keys`: the credentials a group is secured with (see docs/security.md): a
//! group secret and named identities' keys made from it, or a CA and the
//! certificates it issues for identities (ECDSA P-256, rcgen). Files are written
//! new (never over an existing one), keys readable by their owner only.

use crate::out::{CliError, Out};
use clap::Subcommand;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use serde_json::json;
use spindle::views::auth::Secret;
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

fn issue(ca_dir: &Path, name: &str, to: Option<&Path>, days: u32) -> Result<Vec<PathBuf>, CliError> {
    let read = |f: &str| {
        let p = ca_dir.join(f);
        std::fs::read_to_string(&p).map_err(|e| CliError::usage(format!("{}: {e}", p.display())))
    };
    let ca_key = KeyPair::from_pem(&read("ca.key")?).map_err(|e| CliError::usage(format!("ca.key: {e}")))?;
    read("ca.pem")?;
    let ca = ca_params(days).self_signed(&ca_key).map_err(|e| CliError::failed(format!("the CA: {e}")))?;
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
    let today =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| (d.as_secs() / 86_400) as i64);
    let date = |d: i64| {
        let (y, m, day) = civil(d);
        rcgen::date_time_ymd(y, m, day)
    };
    (p.not_before, p.not_after) = (date(today - 1), date(today + i64::from(days)));
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
