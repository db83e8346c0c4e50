//! A certificate authority of a test's own: PEM files of a CA and of
//! certificates it issues for identity names, for groups that admit members and
//! clients by certificate. The files live in a directory removed when the CA is
//! dropped. It can revoke what it issued: a certificate revocation list in
//! `crl.pem`.

use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, IsCa, KeyIdMethod, KeyPair, KeyUsagePurpose,
    RevokedCertParams, SerialNumber,
};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

/// See the module docs.
pub struct TestCa {
    dir: PathBuf,
    cert: rcgen::Certificate,
    key: KeyPair,
    /// The serial numbers issued, by name, and the last one given.
    serials: Mutex<(HashMap<String, Vec<u64>>, u64)>,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TestCa({})", self.dir.display())
    }
}

/// The PEM files of one issued certificate.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The CA's certificate.
    pub ca: PathBuf,
    /// The certificate, for the name it was issued for.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

impl TestCa {
    /// A new CA (ECDSA P-256), its files under the temp directory in
    /// `certs-{tag}-{pid}`.
    pub fn new(tag: &str) -> TestCa {
        let dir = std::env::temp_dir().join(format!("certs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temp directory");
        let key = KeyPair::generate().expect("a key");
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let cert = p.self_signed(&key).expect("a CA certificate");
        std::fs::write(dir.join("ca.pem"), cert.pem()).expect("ca.pem written");
        TestCa { dir, cert, key, serials: Mutex::new((HashMap::new(), 0)) }
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// PEM of the CA's certificate, and of a certificate (with its key) for DNS
    /// name `name`.
    pub fn pem(&self, name: &str) -> (String, String, String) {
        self.pem_valid(name, false)
    }

    /// [`TestCa::pem`] for a certificate whose validity ended in 2020.
    pub fn pem_expired(&self, name: &str) -> (String, String, String) {
        self.pem_valid(name, true)
    }

    fn pem_valid(&self, name: &str, expired: bool) -> (String, String, String) {
        let key = KeyPair::generate().expect("a key");
        let serial = {
            let mut s = self.serials.lock().expect("serials");
            s.1 += 1;
            let n = s.1;
            s.0.entry(name.to_string()).or_default().push(n);
            n
        };
        let mut p = CertificateParams::new(vec![name.to_string()]).expect("a DNS name");
        p.serial_number = Some(SerialNumber::from(serial));
        if expired {
            (p.not_before, p.not_after) = (rcgen::date_time_ymd(2019, 1, 1), rcgen::date_time_ymd(2020, 1, 1));
        }
        let cert = p.signed_by(&key, &self.cert, &self.key).expect("a certificate");
        (self.cert.pem(), cert.pem(), key.serialize_pem())
    }

    /// Writes `crl.pem` beside `ca.pem` anew: a revocation list of this CA that
    /// revokes every certificate issued so far for the names given (none: an
    /// empty list). Its path.
    pub fn revoke(&self, names: &[&str]) -> PathBuf {
        let serials = self.serials.lock().expect("serials");
        // A date in the past: when the list was made and the certificates revoked.
        let now = rcgen::date_time_ymd(2024, 1, 1);
        let revoked_certs = names
            .iter()
            .flat_map(|n| serials.0.get(*n).cloned().unwrap_or_default())
            .map(|s| RevokedCertParams {
                serial_number: SerialNumber::from(s),
                revocation_time: now,
                reason_code: None,
                invalidity_date: None,
            })
            .collect();
        let params = CertificateRevocationListParams {
            this_update: now,
            next_update: rcgen::date_time_ymd(2100, 1, 1),
            crl_number: SerialNumber::from(serials.1),
            issuing_distribution_point: None,
            revoked_certs,
            key_identifier_method: KeyIdMethod::Sha256,
        };
        let crl = params.signed_by(&self.cert, &self.key).expect("a revocation list");
        let path = self.dir.join("crl.pem");
        // Written beside and renamed, so a reader never sees half of it.
        let tmp = self.dir.join("crl.pem.new");
        std::fs::write(&tmp, crl.pem().expect("PEM")).expect("crl written");
        std::fs::rename(&tmp, &path).expect("crl renamed");
        path
    }

    /// [`TestCa::pem`] written to files `{name}.pem` and `{name}.key` beside
    /// `ca.pem`.
    pub fn issue(&self, name: &str) -> Issued {
        let (_, c, k) = self.pem(name);
        let issued = Issued {
            ca: self.dir.join("ca.pem"),
            cert: self.dir.join(format!("{name}.pem")),
            key: self.dir.join(format!("{name}.key")),
        };
        std::fs::write(&issued.cert, c).expect("certificate written");
        std::fs::write(&issued.key, k).expect("key written");
        issued
    }
}

impl Drop for TestCa {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
