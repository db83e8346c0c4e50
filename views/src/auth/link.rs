//! The group secret on the tcp data plane's links (`spindle_sst::transport::tcp`):
//! the proofs each link exchanges at setup, and the ciphers that then seal its
//! records, one key per direction and link:
//!
//! ```text
//!   proof = HMAC(secret, "data link" | transcript)
//!   key   = HMAC(secret, "data link key" | transcript)      (AES-256-GCM)
//!   nonce = the record's number on the link, from 0 (12 bytes, little-endian)
//! ```
//!
//! A transcript names its end's role, both node ids, the group and view, and both
//! ends' fresh nonces, its own first: each direction of each link gets its own key,
//! so a nonce is never used twice under one key. The proof is sent; the key never
//! is. The cipher is the control plane's ([`Sealer`]: AES-256-GCM from aws-lc-rs).
//!
//! With certificates there is no shared secret to prove: each link runs the
//! control plane's TLS 1.3 handshake (module `tls`) on its own stream after the
//! Hellos, the connector as initiator, both chains checked against the CA and the
//! revocation lists and the connector's against the members the group lists. Its
//! two keys are the session's exported keying material:
//!
//! ```text
//!   context = "spindle link" | group u64 | connector's id u32 | acceptor's id u32
//!   keys    = TLS-Exporter("EXPORTER-spindle-data-link", context, 64)
//!             (the first 32 the connector's direction, the last 32 the acceptor's)
//! ```
//!
//! So every link of every view is keyed by its own ephemeral key agreement: a
//! member that leaves (or is removed, and its certificate revoked) holds nothing
//! that opens a link set up after it left, even one it recorded whole.

use super::{random, tls, Certificates, Sealer, Secret};
use spindle_sst::transport::tcp::{Ciphers, LinkAuth, LinkCipher, LinkEnds, SecretProof, TAG};
use std::io::Read;
use std::net::TcpStream;

/// The group secret as the tcp data links' proof and key source.
#[derive(Debug)]
pub(crate) struct LinkProof(pub(crate) Secret);

impl SecretProof for LinkProof {
    fn nonce(&self) -> std::io::Result<[u8; 32]> {
        let mut n = [0u8; 32];
        random(&mut n)?;
        Ok(n)
    }
    fn prove(&self, transcript: &[u8]) -> [u8; 32] {
        self.0.mac(&[b"data link", transcript])
    }
    fn check(&self, transcript: &[u8], proof: &[u8; 32]) -> bool {
        self.0.verify(&[b"data link", transcript], proof)
    }
    fn ciphers(&self, send: &[u8], receive: &[u8]) -> Ciphers {
        let cipher = |t: &[u8]| Box::new(Sealer::new(&self.0.mac(&[b"data link key", t]))) as Box<dyn LinkCipher>;
        (cipher(send), cipher(receive))
    }
}

/// Certificates as the tcp data links' proof and key source: a TLS handshake per
/// link (see the module's text).
#[derive(Debug)]
pub(crate) struct LinkCerts(pub(crate) Certificates);

/// The exporter context of a link: its group (and view) and both ends, the
/// connector's first, so that both ends name it alike.
fn link_context(ends: &LinkEnds) -> [u8; 28] {
    let (connector, acceptor) = if ends.connector { (ends.me, ends.peer) } else { (ends.peer, ends.me) };
    let mut c = [0u8; 28];
    c[..12].copy_from_slice(b"spindle link");
    c[12..20].copy_from_slice(&ends.group.to_le_bytes());
    c[20..24].copy_from_slice(&connector.0.to_le_bytes());
    c[24..].copy_from_slice(&acceptor.0.to_le_bytes());
    c
}

impl LinkAuth for LinkCerts {
    fn handshake(&self, s: &mut TcpStream, ends: LinkEnds) -> Result<Ciphers, String> {
        let context = link_context(&ends);
        let opens = tls::Opens::Link(&context);
        let keys = if ends.connector {
            tls::initiate(s, &self.0, opens)
        } else {
            let mut head = [0u8; 5];
            s.read_exact(&mut head).map_err(|e| format!("{}: read handshake: {e}", ends.peer))?;
            tls::respond(s, &self.0, head, opens)
        }
        .map_err(|e| format!("{}: {e}", ends.peer))?;
        if !keys.member {
            return Err(format!("{}: {}", ends.peer, super::AuthError::ClientOnly));
        }
        Ok((Box::new(keys.tx), Box::new(keys.rx)))
    }
}

impl LinkCipher for Sealer {
    fn seal(&mut self, header: &[u8], body: &mut [u8]) -> [u8; TAG] {
        Sealer::seal(self, header, body)
    }
    fn open(&mut self, header: &[u8], body: &mut [u8], tag: &[u8; TAG]) -> bool {
        Sealer::open(self, header, body, tag)
    }
    fn seal_into(&mut self, header: &[u8], first: &[u8], second: &[u8], out: &mut [u8]) {
        Sealer::seal_into(self, header, first, second, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Ciphers, Ciphers) {
        let p = LinkProof(Secret::from_bytes(&[7u8; 32]).unwrap());
        (p.ciphers(b"a", b"b"), p.ciphers(b"b", b"a"))
    }

    #[test]
    fn records_open_at_the_other_end_in_order_and_changed_ones_do_not() {
        let ((mut a_tx, _), (_, mut b_rx)) = pair();
        let mut body = b"a row push".to_vec();
        let tag = a_tx.seal(b"len1", &mut body);
        assert_ne!(&body[..], b"a row push", "sealed bytes are not the plaintext");
        let mut second = b"the next".to_vec();
        let tag2 = a_tx.seal(b"len2", &mut second);
        // Out of order: the second record under the first's number fails.
        assert!(!b_rx.open(b"len2", &mut second.clone(), &tag2));
        let mut changed = body.clone();
        changed[0] ^= 1;
        assert!(!b_rx.open(b"len1", &mut changed, &tag), "a changed byte fails");
        assert!(!b_rx.open(b"len9", &mut body.clone(), &tag), "a changed header fails");
        assert!(b_rx.open(b"len1", &mut body, &tag));
        assert_eq!(&body[..], b"a row push");
        assert!(b_rx.open(b"len2", &mut second, &tag2));
        assert_eq!(&second[..], b"the next");
    }

    #[test]
    fn a_record_sealed_from_two_pieces_is_the_record_of_the_two_joined() {
        let ((mut a_tx, _), (_, mut b_rx)) = pair();
        let ((mut c_tx, _), _) = pair();
        let (first, second) = (&b"frame prefix"[..], &[9u8; 1000][..]);
        let mut out = vec![0u8; first.len() + second.len() + TAG];
        a_tx.seal_into(b"h", first, second, &mut out);
        let mut joined = [first, second].concat();
        let tag = c_tx.seal(b"h", &mut joined);
        assert_eq!(&out[..joined.len()], &joined[..], "the same ciphertext as sealed in place");
        assert_eq!(&out[joined.len()..], &tag[..], "and the same tag");
        let (body, tag) = out.split_at_mut(first.len() + second.len());
        assert!(b_rx.open(b"h", body, &tag[..].try_into().unwrap()));
        assert_eq!(&body[..first.len()], first);
        assert_eq!(&body[first.len()..], second);
    }

    #[test]
    fn the_two_directions_and_other_secrets_have_other_keys() {
        let ((mut a_tx, mut a_rx), _) = pair();
        let mut body = b"reflected".to_vec();
        let tag = a_tx.seal(b"h", &mut body);
        assert!(!a_rx.open(b"h", &mut body.clone(), &tag), "a record reflected back does not open");
        let other = LinkProof(Secret::from_bytes(&[8u8; 32]).unwrap());
        let (_, mut o_rx) = other.ciphers(b"b", b"a");
        assert!(!o_rx.open(b"h", &mut body, &tag), "another secret's key does not open it");
    }
    mod certs {
        use super::super::*;
        use spindle_sst::transport::NodeId;
        use std::net::{TcpListener, TcpStream};
        use std::time::Duration;
        use testkit::certs::TestCa;

        fn certs(ca: &TestCa, name: &str) -> Certificates {
            let (a, c, k) = ca.pem(name);
            Certificates::from_pem(a.as_bytes(), c.as_bytes(), k.as_bytes(), name).unwrap()
        }

        type Ends = (Result<Ciphers, String>, Result<Ciphers, String>);

        /// One link's handshake over loopback, node 1 connecting to node 2 in group 9.
        fn link(connector: Certificates, acceptor: Certificates) -> Ends {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let accepting = std::thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let ends = LinkEnds { connector: false, me: NodeId(2), peer: NodeId(1), group: 9 };
                let out = LinkCerts(acceptor).handshake(&mut s, ends);
                drop(s); // a refusal closes the link, which ends the connector's wait
                out
            });
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let ends = LinkEnds { connector: true, me: NodeId(1), peer: NodeId(2), group: 9 };
            let connecting = LinkCerts(connector).handshake(&mut s, ends);
            drop(s);
            (connecting, accepting.join().unwrap())
        }

        /// Whether a record sealed by `tx` opens at `rx`.
        fn opens(tx: &mut dyn LinkCipher, rx: &mut dyn LinkCipher) -> bool {
            let mut body = b"a row push".to_vec();
            let tag = tx.seal(b"head", &mut body);
            rx.open(b"head", &mut body, &tag) && body == b"a row push"
        }

        #[test]
        fn members_of_the_ca_key_each_link_afresh_both_ways() {
            let ca = TestCa::new("link-certs");
            let (a, b) = (certs(&ca, "node-a"), certs(&ca, "node-b"));
            let (Ok((mut c_tx, mut c_rx)), Ok((mut a_tx, mut a_rx))) = link(a.clone(), b.clone()) else {
                panic!("members of one CA open a link")
            };
            // The same two members again, as in the next view.
            let (Ok((mut c2_tx, _)), Ok((_, mut a2_rx))) = link(a, b) else { panic!("a second link") };
            // Each link's first record, both numbered 0: each opens under its own
            // link's key only.
            let mut first = b"a row push".to_vec();
            let tag = c_tx.seal(b"head", &mut first);
            let mut second = b"a row push".to_vec();
            let tag2 = c2_tx.seal(b"head", &mut second);
            assert_ne!(first, second, "two links, two keys");
            assert!(!a2_rx.open(b"head", &mut first.clone(), &tag), "the first link's record under the second's key");
            assert!(!a_rx.open(b"head", &mut second.clone(), &tag2), "the second link's record under the first's key");
            assert!(a_rx.open(b"head", &mut first, &tag) && first == b"a row push", "connector to acceptor");
            assert!(a2_rx.open(b"head", &mut second, &tag2) && second == b"a row push");
            assert!(opens(&mut *a_tx, &mut *c_rx), "acceptor to connector");
        }

        #[test]
        fn another_ca_a_revoked_certificate_or_a_client_only_identity_opens_no_link() {
            let ca = TestCa::new("link-refused");
            let other = TestCa::new("link-refused-other");
            let b = certs(&ca, "node-b");
            let (c, a) = link(certs(&other, "node-x"), b.clone());
            assert!(c.is_err() && a.is_err(), "another CA's certificate");
            let r = certs(&ca, "node-r"); // issued before the list that revokes it
            let list = ca.revoke(&["node-r"]);
            let (c, a) = link(r, b.clone().revocation_list(&list).unwrap());
            assert!(c.is_err(), "the connector is told: {:?} / {:?}", c.as_ref().err(), a.as_ref().err());
            assert!(a.as_ref().is_err_and(|e| e.contains("revoked")), "a revoked certificate: {:?}", a.err());
            let listed = b.members(vec!["node-a".into(), "node-b".into()]);
            let (_, a) = link(certs(&ca, "node-c"), listed);
            assert!(a.as_ref().is_err_and(|e| e.contains("client sessions only")), "not a member: {:?}", a.err());
        }
    }
}
