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

use super::{random, Sealer, Secret};
use spindle_sst::transport::tcp::{Ciphers, LinkAuth, LinkCipher, TAG};

/// The group secret as the tcp data links' proof and key source.
#[derive(Debug)]
pub(crate) struct LinkProof(pub(crate) Secret);

impl LinkAuth for LinkProof {
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
}
