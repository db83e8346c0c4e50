//! The certificate handshake, both ends over loopback.

use super::*;
use proptest::prelude::*;
use std::net::{TcpListener, TcpStream};
use testkit::certs::TestCa;

fn certs(ca: &TestCa, name: &str) -> Certificates {
    let (a, c, k) = ca.pem(name);
    Certificates::from_pem(a.as_bytes(), c.as_bytes(), k.as_bytes(), name).unwrap()
}

/// Runs both sides over loopback; each side's keys or error.
fn run(init: &Certificates, resp: &Certificates) -> (Result<Keys, AuthError>, Result<Keys, AuthError>) {
    let resp = resp.clone();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
        let mut head = [0u8; 5];
        s.read_exact(&mut head).unwrap();
        let mut k = respond(&mut s, &resp, head, Opens::Control);
        if let Ok(k) = &mut k {
            let mut body = [0u8; 8];
            s.read_exact(&mut body).unwrap();
            let mut tag = [0u8; 16];
            s.read_exact(&mut tag).unwrap();
            assert!(k.rx.open(b"h", &mut body, &tag), "the first frame after the handshake opens");
            assert_eq!(&body, b"after tl");
        }
        k
    });
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
    let mut k = initiate(&mut s, init, Opens::Control);
    if let Ok(k) = &mut k {
        let mut body = *b"after tl";
        let tag = k.tx.seal(b"h", &mut body);
        // A responder that refused the initiator has closed the connection: the
        // write may fail then, and the responder's result says why.
        let _ = s.write_all(&body).and_then(|_| s.write_all(&tag));
    }
    (k, server.join().unwrap())
}

#[test]
fn both_ends_of_the_ca_agree_on_keys_and_the_responder_learns_the_identity() {
    let ca = TestCa::new("unit-1");
    let (i, r) = run(&certs(&ca, "node-a"), &certs(&ca, "node-b"));
    let (i, r) = (i.unwrap(), r.unwrap());
    assert_eq!(r.peer.as_deref(), Some("node-a"));
    assert!(r.member, "every identity of the CA is a member's without a list");
    assert!(i.member);
}

#[test]
fn another_ca_fails_either_way() {
    let (ca, other) = (TestCa::new("unit-a"), TestCa::new("unit-b"));
    let (i, r) = run(&certs(&other, "node-x"), &certs(&ca, "node-b"));
    assert!(matches!(i, Err(AuthError::Failed)), "{i:?}");
    assert!(r.is_err());
    let (i, r) = run(&certs(&ca, "node-a"), &certs(&other, "node-y"));
    assert!(matches!(i, Err(AuthError::Failed)), "{i:?}");
    assert!(r.is_err());
}

#[test]
fn an_identity_the_certificate_does_not_name_fails() {
    let ca = TestCa::new("unit-2");
    let mut liar = certs(&ca, "node-c");
    liar.name = "node-a".into();
    let (i, r) = run(&liar, &certs(&ca, "node-b"));
    assert!(matches!(r, Err(AuthError::Failed)), "{r:?}");
    assert!(matches!(i, Err(AuthError::Failed)), "the liar hears it was refused: {i:?}");
}

#[test]
fn a_listed_group_makes_other_identities_clients() {
    let ca = TestCa::new("unit-3");
    let resp = certs(&ca, "node-b").members(vec!["node-b".into()]);
    let (_, r) = run(&certs(&ca, "dashboard"), &resp);
    let r = r.unwrap();
    assert_eq!((r.peer.as_deref(), r.member), (Some("dashboard"), false));
}

#[test]
fn loading_checks_the_files() {
    let ca = TestCa::new("unit-4");
    let (ca_pem, c, k) = ca.pem("node-a");
    let (_, _, other_key) = ca.pem("node-a");
    let load = |a: &str, c: &str, k: &str, n: &str| Certificates::from_pem(a.as_bytes(), c.as_bytes(), k.as_bytes(), n);
    assert!(matches!(load(&ca_pem, &c, &k, "node-b"), Err(CertError::Name(_))));
    assert!(matches!(load(&ca_pem, &c, &other_key, "node-a"), Err(CertError::Pair)));
    assert!(matches!(load("", &c, &k, "node-a"), Err(CertError::Pem { what: "ca", .. })));
    assert!(matches!(load(&ca_pem, "", &k, "node-a"), Err(CertError::Pem { what: "cert", .. })));
    assert!(matches!(load(&ca_pem, &c, "", "node-a"), Err(CertError::Pem { what: "key", .. })));
    assert!(matches!(load(&ca_pem, &c, &k, "a b"), Err(CertError::Identity(_))));
    assert!(load(&ca_pem, &c, &k, "node-a").is_ok());
}

/// A list that revokes `names`, loaded by `c`.
fn with_list(c: Certificates, ca: &TestCa, names: &[&str]) -> Certificates {
    c.revocation_list(&ca.revoke(names)).unwrap()
}

#[test]
fn a_revoked_initiator_is_refused_and_both_ends_say_so() {
    let ca = TestCa::new("unit-crl-1");
    let a = certs(&ca, "node-a");
    let resp = with_list(certs(&ca, "node-b"), &ca, &["node-a"]);
    let (i, r) = run(&a, &resp);
    assert!(matches!(r, Err(AuthError::PeerRevoked)), "{r:?}");
    assert!(matches!(i, Err(AuthError::Revoked)), "the initiator hears its own is revoked: {i:?}");
    let (i, r) = run(&certs(&ca, "node-c"), &resp);
    assert!(i.is_ok() && r.is_ok(), "a certificate the list does not name: {i:?} {r:?}");
}

#[test]
fn a_revoked_responder_is_refused_by_the_initiator() {
    let ca = TestCa::new("unit-crl-2");
    let b = certs(&ca, "node-b");
    let init = with_list(certs(&ca, "node-a"), &ca, &["node-b"]);
    let (i, r) = run(&init, &b);
    assert!(matches!(i, Err(AuthError::PeerRevoked)), "{i:?}");
    assert!(matches!(r, Err(AuthError::Revoked)), "the responder hears its own is revoked: {r:?}");
}

#[test]
fn a_list_changed_on_disk_counts_from_the_next_handshake_and_a_bad_one_refuses_all() {
    let ca = TestCa::new("unit-crl-3");
    let a = certs(&ca, "node-a");
    let resp = with_list(certs(&ca, "node-b"), &ca, &[]);
    let (i, r) = run(&a, &resp);
    assert!(i.is_ok() && r.is_ok(), "an empty list revokes nothing: {i:?} {r:?}");
    let path = ca.revoke(&["node-a"]);
    let (_, r) = run(&a, &resp);
    assert!(matches!(r, Err(AuthError::PeerRevoked)), "the list written since: {r:?}");
    // A list that cannot be read leaves every certificate's status unknown.
    std::fs::write(&path, b"-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n").unwrap();
    let (_, r) = run(&certs(&ca, "node-c"), &resp);
    assert!(matches!(r, Err(AuthError::Failed)), "a broken list: {r:?}");
    std::fs::remove_file(&path).unwrap();
    let (_, r) = run(&certs(&ca, "node-c"), &resp);
    assert!(matches!(r, Err(AuthError::Failed)), "no list at all: {r:?}");
    ca.revoke(&["node-a"]);
    let (i, r) = run(&certs(&ca, "node-c"), &resp);
    assert!(i.is_ok() && r.is_ok(), "the list mended: {i:?} {r:?}");
}

#[test]
fn a_list_of_another_ca_leaves_the_status_unknown() {
    let (ca, other) = (TestCa::new("unit-crl-4"), TestCa::new("unit-crl-4b"));
    let resp = with_list(certs(&ca, "node-b"), &other, &[]);
    let (_, r) = run(&certs(&ca, "node-a"), &resp);
    assert!(matches!(r, Err(AuthError::Failed)), "{r:?}");
}

#[test]
fn a_file_without_a_list_is_refused_at_load() {
    let ca = TestCa::new("unit-crl-5");
    let path = ca.dir().join("not-a-crl.pem");
    std::fs::write(&path, ca.pem("x").0).unwrap();
    assert!(matches!(certs(&ca, "node-a").revocation_list(&path), Err(CertError::Crl)));
    let missing = ca.dir().join("missing.pem");
    assert!(matches!(certs(&ca, "node-a").revocation_list(&missing), Err(CertError::Read { .. })));
}

#[test]
fn an_expired_certificate_is_refused_at_either_end_and_both_say_so() {
    let ca = TestCa::new("unit-exp");
    let (a, c, k) = ca.pem_expired("node-old");
    let old = Certificates::from_pem(a.as_bytes(), c.as_bytes(), k.as_bytes(), "node-old").unwrap();
    let (i, r) = run(&old, &certs(&ca, "node-b"));
    assert!(matches!(r, Err(AuthError::PeerExpired)), "{r:?}");
    assert!(matches!(i, Err(AuthError::Expired)), "the initiator hears its own has expired: {i:?}");
    let (i, r) = run(&certs(&ca, "node-a"), &old);
    assert!(matches!(i, Err(AuthError::PeerExpired)), "an expired responder: {i:?}");
    assert!(matches!(r, Err(AuthError::Expired)), "the responder hears its own has expired: {r:?}");
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
        prop_assert!(respond(&mut s, certs, head, Opens::Control).is_err());
    }
}
