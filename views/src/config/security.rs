//! The `[security]` table of a group's configuration: a secret, or
//! certificates, and where else they may come from.

use super::{invalid, ConfigError};
use serde::Deserialize;

/// The `[security]` table: a group given a secret, or certificates of a CA,
/// admits only processes that hold them (see [`crate::auth`] and
/// docs/security.md). Give one kind or the other.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Security {
    /// A file of at least 32 random bytes, the same at every member and client
    /// (`head -c 32 /dev/urandom > group.key; chmod 600 group.key`). Absent: the
    /// file named by `SPINDLE_SECRET_FILE`, if set; else no secret (anyone who
    /// reaches a port takes part, as on a trusted network).
    #[serde(default)]
    pub secret_file: Option<std::path::PathBuf>,
    /// With a secret: a client's named identity (`secret_file` then holds that
    /// identity's key, made from the group secret by
    /// [`crate::auth::Secret::identity`]); members name none. With certificates:
    /// the identity this process's certificate names (a DNS name of its subject
    /// alternative names), for members and clients alike.
    #[serde(default)]
    pub identity: Option<String>,
    /// The group's CA certificate (PEM): with `cert_file` and `key_file`, members
    /// and clients prove themselves with certificates of this CA instead of a
    /// secret (see [`crate::auth::tls`]).
    #[serde(default)]
    pub ca_file: Option<std::path::PathBuf>,
    /// This process's certificate (PEM, then any intermediates).
    #[serde(default)]
    pub cert_file: Option<std::path::PathBuf>,
    /// The private key of `cert_file` (PEM).
    #[serde(default)]
    pub key_file: Option<std::path::PathBuf>,
    /// With certificates: the identities that may join as members (others of the
    /// CA may open client sessions only). Absent: every certificate of the CA.
    #[serde(default)]
    pub members: Option<Vec<String>>,
    /// With certificates: a PEM file of certificate revocation lists, one per CA
    /// of the chains the group takes (`spindle keys revoke` writes one). Every
    /// handshake, at both ends, refuses a certificate a list revokes, and one
    /// whose issuer has no list here; the file is read again when it changes.
    /// Absent: [`CRL_ENV`]'s file, if set; else no revocation.
    #[serde(default)]
    pub crl_file: Option<std::path::PathBuf>,
    /// With certificates: how often, in milliseconds, each member checks the
    /// certificates of its view's members again (a handshake with each, which
    /// checks both ends' chains, revocation lists and expiry). A member whose
    /// certificate was revoked, or expired, while it runs is then suspected and
    /// removed, and stops itself once a member refuses its certificate. Absent:
    /// [`DEFAULT_RECHECK_MS`]; 0: never (certificates are checked only when a
    /// connection opens).
    #[serde(default)]
    pub recheck_ms: Option<u64>,
}

/// How often members check each other's certificates again unless told (see
/// [`Security::recheck_ms`]).
pub const DEFAULT_RECHECK_MS: u64 = 30_000;

/// The environment variable that names a secret file when the configuration
/// names none.
pub const SECRET_ENV: &str = "SPINDLE_SECRET_FILE";
/// The environment variables that give certificates when the configuration
/// names neither a secret nor certificates: the CA's file, this process's
/// certificate file, its key file, and the identity it names (all four).
pub const CERT_ENV: [&str; 4] = ["SPINDLE_CA_FILE", "SPINDLE_CERT_FILE", "SPINDLE_KEY_FILE", "SPINDLE_IDENTITY"];

/// The environment variable that names a revocation list file when the
/// configuration names none (with certificates only).
pub const CRL_ENV: &str = "SPINDLE_CRL_FILE";

impl Security {
    /// The group's secret: from `secret_file`, else from [`SECRET_ENV`]'s file, else
    /// none. (With certificates, none: see [`Security::credentials`].)
    pub fn secret(&self) -> Result<Option<crate::auth::Secret>, ConfigError> {
        if self.cert_file.is_some() {
            return Ok(None);
        }
        let path =
            self.secret_file.clone().or_else(|| std::env::var_os(SECRET_ENV).filter(|v| !v.is_empty()).map(Into::into));
        match path {
            None => Ok(None),
            Some(p) => {
                let s = crate::auth::Secret::load(&p).map_err(|e| invalid("security.secret_file", e.to_string()))?;
                match &self.identity {
                    None => Ok(Some(s)),
                    Some(n) => s.named(n).map(Some).map_err(|e| invalid("security.identity", e.to_string())),
                }
            }
        }
    }

    /// What this process proves itself with: certificates if `cert_file` is
    /// given (with `ca_file`, `key_file` and `identity`), else the secret of
    /// [`Security::secret`], else certificates of [`CERT_ENV`] if set, else
    /// nothing.
    pub fn credentials(&self) -> Result<Option<crate::auth::Credentials>, ConfigError> {
        let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        if self.cert_file.is_none() && self.secret_file.is_none() && env(CERT_ENV[1]).is_some() {
            if env(SECRET_ENV).is_some() {
                return Err(invalid("security", "SPINDLE_SECRET_FILE and SPINDLE_CERT_FILE are both set"));
            }
            let from_env = Security {
                ca_file: env(CERT_ENV[0]).map(Into::into),
                cert_file: env(CERT_ENV[1]).map(Into::into),
                key_file: env(CERT_ENV[2]).map(Into::into),
                identity: env(CERT_ENV[3]).and_then(|v| v.into_string().ok()),
                members: self.members.clone(),
                crl_file: self.crl_file.clone(),
                recheck_ms: self.recheck_ms,
                ..Security::default()
            };
            return from_env.credentials();
        }
        let Some(cert) = &self.cert_file else {
            let with_certs = [self.ca_file.is_some(), self.key_file.is_some(), self.members.is_some()];
            if with_certs.contains(&true) || self.crl_file.is_some() || self.recheck_ms.is_some() {
                return Err(invalid(
                    "security.cert_file",
                    "ca_file, key_file, members, crl_file and recheck_ms need a cert_file",
                ));
            }
            return Ok(self.secret()?.map(Into::into));
        };
        if self.secret_file.is_some() {
            return Err(invalid("security.secret_file", "give a secret or certificates, not both"));
        }
        let ca = self.ca_file.as_ref().ok_or_else(|| invalid("security.ca_file", "certificates need the CA's"))?;
        let key = self.key_file.as_ref().ok_or_else(|| invalid("security.key_file", "certificates need their key"))?;
        let name = self
            .identity
            .as_deref()
            .ok_or_else(|| invalid("security.identity", "certificates need the identity they name"))?;
        let mut certs = crate::auth::Certificates::load(ca, cert, key, name).map_err(|e| {
            use crate::auth::CertError as E;
            // The setting the error is about.
            let field = match &e {
                E::Read { path, .. } if *path == ca.display().to_string() => "security.ca_file",
                E::Read { path, .. } if *path == key.display().to_string() => "security.key_file",
                E::Pem { what: "ca", .. } | E::Ca => "security.ca_file",
                E::Pem { what: "key", .. } => "security.key_file",
                E::Identity(_) => "security.identity",
                _ => "security.cert_file",
            };
            invalid(field, e.to_string())
        })?;
        if let Some(m) = &self.members {
            certs = certs.members(m.clone());
        }
        if let Some(crl) = self.crl_file.clone().or_else(|| env(CRL_ENV).map(Into::into)) {
            certs = certs.revocation_list(&crl).map_err(|e| invalid("security.crl_file", e.to_string()))?;
        }
        Ok(Some(certs.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recheck_ms_parses_and_needs_certificates() {
        let s: Security = toml::from_str("recheck_ms = 500\n").unwrap();
        assert_eq!(s.recheck_ms, Some(500));
        let e = s.credentials().unwrap_err().to_string();
        assert!(e.contains("recheck_ms need a cert_file"), "{e}");
        let none: Security = toml::from_str("").unwrap();
        assert_eq!(none.recheck_ms, None, "absent: the default applies");
    }

    #[test]
    fn a_certificate_file_that_cannot_be_read_is_named_by_its_setting() {
        let ca = testkit::certs::TestCa::new("cfg-files");
        let f = ca.issue("node-a");
        let missing = ca.dir().join("missing.pem");
        let with = |ca_file: &std::path::Path, cert: &std::path::Path, key: &std::path::Path| Security {
            ca_file: Some(ca_file.into()),
            cert_file: Some(cert.into()),
            key_file: Some(key.into()),
            identity: Some("node-a".into()),
            ..Security::default()
        };
        assert!(with(&f.ca, &f.cert, &f.key).credentials().is_ok());
        for (s, field) in [
            (with(&missing, &f.cert, &f.key), "security.ca_file"),
            (with(&f.ca, &missing, &f.key), "security.cert_file"),
            (with(&f.ca, &f.cert, &missing), "security.key_file"),
            (with(&f.key, &f.cert, &f.key), "security.ca_file"), // a key where the CA should be
        ] {
            let e = s.credentials().expect_err("refused").to_string();
            assert!(e.contains(field), "{field}: {e}");
        }
    }
}
