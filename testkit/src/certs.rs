//! A certificate authority of a test's own: PEM files of a CA and of
//! certificates it issues for identity names, for groups that admit members and
//! clients by certificate. The files live in a directory removed when the CA is
//! dropped.

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use std::path::PathBuf;

/// See the module docs.
pub struct TestCa {
    dir: PathBuf,
    cert: rcgen::Certificate,
    key: KeyPair,
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
        let cert = p.self_signed(&key).expect("a CA certificate");
        std::fs::write(dir.join("ca.pem"), cert.pem()).expect("ca.pem written");
        TestCa { dir, cert, key }
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// PEM of the CA's certificate, and of a certificate (with its key) for DNS
    /// name `name`.
    pub fn pem(&self, name: &str) -> (String, String, String) {
        let key = KeyPair::generate().expect("a key");
        let cert = CertificateParams::new(vec![name.to_string()])
            .expect("a DNS name")
            .signed_by(&key, &self.cert, &self.key)
            .expect("a certificate");
        (self.cert.pem(), cert.pem(), key.serialize_pem())
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
