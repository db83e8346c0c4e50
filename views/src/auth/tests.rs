use super::*;
use proptest::prelude::*;
use std::os::unix::net::UnixStream;

fn secret(b: u8) -> Secret {
    Secret::from_bytes(&[b; 32]).unwrap()
}

/// Runs both sides of a handshake on a socket pair.
fn pair(a: Secret, b: Secret) -> (Result<Keys, AuthError>, Result<Keys, AuthError>) {
    let (mut x, mut y) = UnixStream::pair().unwrap();
    x.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    y.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let responder = std::thread::spawn(move || {
        let mut head = [0u8; 5];
        y.read_exact(&mut head)?;
        respond(&mut y, &b, head)
    });
    let i = initiate(&mut x, &a);
    drop(x);
    (i, responder.join().unwrap())
}

/// A frame sealed by `t`: (header, encrypted body, tag).
fn sealed(t: &mut Sealer, header: &[u8], body: &[u8]) -> (Vec<u8>, Vec<u8>, [u8; TAG]) {
    let mut b = body.to_vec();
    let tag = t.seal(header, &mut b);
    (header.to_vec(), b, tag)
}

/// Opens a sealed frame with `t`: the body if it holds.
fn opened(t: &mut Sealer, (h, b, tag): &(Vec<u8>, Vec<u8>, [u8; TAG])) -> Option<Vec<u8>> {
    let mut b = b.clone();
    t.open(h, &mut b, tag).then_some(b)
}

#[test]
fn the_same_secret_authenticates_both_ways_and_seals_frames_in_order() {
    let (i, r) = pair(secret(7), secret(7));
    let (mut i, mut r) = (i.unwrap(), r.unwrap());
    let one = sealed(&mut i.tx, b"head1", b"frame one");
    let two = sealed(&mut i.tx, b"head2", b"frame two");
    assert_ne!(one.1, b"frame one", "the body travels encrypted");
    assert_eq!(opened(&mut r.rx, &two), None, "out of order");
    assert_eq!(opened(&mut r.rx, &one).as_deref(), Some(&b"frame one"[..]));
    assert_eq!(opened(&mut r.rx, &one), None, "a replay");
    let mut changed = two.clone();
    changed.1[3] ^= 1;
    assert_eq!(opened(&mut r.rx, &changed), None, "a changed byte");
    let mut header = two.clone();
    header.0[0] ^= 1;
    assert_eq!(opened(&mut r.rx, &header), None, "a changed header");
    assert_eq!(opened(&mut r.rx, &two).as_deref(), Some(&b"frame two"[..]));
    // The other direction has its own key.
    let back = sealed(&mut r.tx, b"h", b"reply");
    assert_eq!(opened(&mut i.rx, &back).as_deref(), Some(&b"reply"[..]));
    let mut r2 = pair(secret(7), secret(7)).1.unwrap();
    assert_eq!(opened(&mut r2.rx, &one), None, "a frame of another connection");
}

#[test]
fn another_secret_is_refused_at_both_ends() {
    let (i, r) = pair(secret(1), secret(2));
    assert!(matches!(i, Err(AuthError::Failed)), "{:?}", i.err());
    // The initiator stops at the responder's tag: the responder sees the end.
    assert!(r.is_err());
}

#[test]
fn secrets_are_refused_below_32_bytes_and_never_printed() {
    assert!(matches!(Secret::from_bytes(&[1; 31]), Err(SecretError::Length(31))));
    let s = secret(0x41);
    assert_eq!(format!("{s:?}"), "Secret(32 bytes)");
    let dir = std::env::temp_dir().join(format!("views-secret-{}", std::process::id()));
    let _ = std::fs::remove_file(&dir);
    let made = Secret::generate(&dir).unwrap();
    assert_eq!(Secret::load(&dir).unwrap(), made);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o600);
    }
    assert!(Secret::generate(&dir).is_err(), "never overwrites a secret");
    std::fs::remove_file(&dir).unwrap();
}

#[test]
fn beacon_tags_bind_the_bytes_and_the_time() {
    let s = secret(3);
    let tag = s.beacon_tag(b"beacon bytes", 1000);
    assert!(s.beacon_ok(b"beacon bytes", 1000, &tag));
    assert!(!s.beacon_ok(b"beacon bytes", 1001, &tag));
    assert!(!s.beacon_ok(b"beacon bytez", 1000, &tag));
    assert!(!secret(4).beacon_ok(b"beacon bytes", 1000, &tag));
}

/// A socket whose peer sent `bytes` and closed.
fn fed(bytes: &[u8]) -> UnixStream {
    let (mut x, y) = UnixStream::pair().unwrap();
    y.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    x.write_all(bytes).unwrap();
    y
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Whatever an initiator sends, the responder refuses it without panicking.
    #[test]
    fn hostile_handshakes_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
        let mut y = fed(&bytes);
        let mut head = [0u8; 5];
        let got = y.read_exact(&mut head).map_err(AuthError::from).and_then(|_| respond(&mut y, &secret(9), head));
        prop_assert!(got.is_err());
    }

    /// Whatever a responder answers, the initiator refuses it without panicking.
    #[test]
    fn hostile_answers_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
        prop_assert!(initiate(&mut fed(&bytes), &secret(9)).is_err());
    }
}

/// What a stream carried one way, for replaying it.
struct Recorder {
    inner: UnixStream,
    sent: Vec<u8>,
}

impl Read for Recorder {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(b)
    }
}

impl Write for Recorder {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.sent.extend_from_slice(b);
        self.inner.write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[test]
fn a_recorded_handshake_replayed_on_a_new_connection_is_refused() {
    let s = secret(5);
    let (x, mut y) = UnixStream::pair().unwrap();
    let s2 = s.clone();
    let responder = std::thread::spawn(move || {
        let mut head = [0u8; 5];
        y.read_exact(&mut head)?;
        respond(&mut y, &s2, head)
    });
    let mut rec = Recorder { inner: x, sent: Vec::new() };
    let mut keys = initiate(&mut rec, &s).unwrap();
    assert!(responder.join().unwrap().is_ok());
    let (h, b, tag) = sealed(&mut keys.tx, b"head", b"a join request");
    rec.sent.extend_from_slice(&h);
    rec.sent.extend_from_slice(&b);
    rec.sent.extend_from_slice(&tag);
    // The whole transcript, sent again to a member: its fresh nonce makes the
    // recorded proof worthless.
    let (mut x2, mut y2) = UnixStream::pair().unwrap();
    y2.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    x2.write_all(&rec.sent).unwrap();
    let mut head = [0u8; 5];
    y2.read_exact(&mut head).unwrap();
    assert!(matches!(respond(&mut y2, &s, head), Err(AuthError::Failed)));
}
