//! A group given a secret admits only processes that hold it: members and clients
//! with another secret, or none, are refused within seconds and told why, the
//! group sees no view change, and a frame changed on an authenticated link closes
//! that link while the group goes on. Over tcp with a contact and over shm with
//! discovery. Every wait has a deadline.

mod common;

use common::flipper::Flipper;
use spindle_views::auth::{AuthError, Secret};
use spindle_views::client::Client;
use spindle_views::config::{Config, Transport};
use spindle_views::group::{Group, GroupBuilder, StartError};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

/// Secret files in a directory of the test's own, removed at the end.
struct Keys(PathBuf);

impl Keys {
    fn new(tag: &str) -> Keys {
        let dir = std::env::temp_dir().join(format!("views-sec-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Keys(dir)
    }
    fn make(&self, name: &str) -> PathBuf {
        let p = self.0.join(name);
        Secret::generate(&p).unwrap();
        p
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config(name: &str, t: Transport, contact: Option<SocketAddr>, secret: Option<&PathBuf>) -> Config {
    let mut b = Config::local()
        .name(name)
        .transport(t)
        .discovery(contact.is_none())
        .timeouts(Duration::from_millis(50), Duration::from_millis(600));
    if let Some(c) = contact {
        b = b.contact(c);
    }
    if let Some(s) = secret {
        b = b.secret_file(s);
    }
    b.build().unwrap()
}

fn two(gs: &[&Group]) -> bool {
    testkit::poll_until(WAIT, Duration::from_millis(5), || {
        gs.iter().all(|g| g.members().len() == 2) && gs[0].view().map(|v| v.id()) == gs[1].view().map(|v| v.id())
    })
}

/// Starts a member that must be refused: how long it took and why.
fn refused(cfg: Config) -> (Duration, StartError) {
    let t0 = Instant::now();
    let e = GroupBuilder::new(cfg).start().expect_err("a member without the secret joined");
    (t0.elapsed(), e)
}

fn check_refusals(name: &str, t: Transport, keys: &Keys, contact: impl Fn(&Group) -> Option<SocketAddr>) {
    let good = keys.make("good");
    let bad = keys.make("bad");
    let a = GroupBuilder::new(config(name, t, None, Some(&good))).start().unwrap();
    let b = GroupBuilder::new(config(name, t, contact(&a), Some(&good))).start().unwrap();
    assert!(two(&[&a, &b]), "{:?} {:?}", a.view(), b.view());
    let view = a.view().map(|v| v.id());
    let (took, e) = refused(config(name, t, contact(&a), Some(&bad)));
    assert!(matches!(e, StartError::Auth { why: AuthError::Failed, .. }), "{e}");
    assert!(e.to_string().contains("join refused") && e.to_string().contains("authentication failed"), "{e}");
    assert!(took < Duration::from_secs(10), "told after {took:?}");
    let (took, e) = refused(config(name, t, contact(&a), None));
    assert!(matches!(e, StartError::Auth { why: AuthError::Required, .. }), "{e}");
    assert!(took < Duration::from_secs(10), "told after {took:?}");
    // The group saw neither: no view change, no member lost.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(a.view().map(|v| v.id()), view);
    assert_eq!((a.members().len(), b.members().len()), (2, 2));
}

#[test]
fn members_with_another_secret_or_none_are_refused_over_tcp_with_a_contact() {
    let keys = Keys::new("tcp");
    let name = format!("sect{}", std::process::id());
    check_refusals(&name, Transport::Tcp, &keys, |a| Some(a.listen_addr()));
}

#[test]
fn members_with_another_secret_or_none_are_refused_over_shm_by_discovery() {
    let keys = Keys::new("shm");
    let name = format!("secs{}", std::process::id());
    check_refusals(&name, Transport::Shm, &keys, |_| None);
}

#[test]
fn clients_need_the_secret_and_a_changed_frame_closes_only_its_link() {
    let keys = Keys::new("cl");
    let good = keys.make("good");
    let name = format!("secc{}", std::process::id());
    let a = GroupBuilder::new(config(&name, Transport::Tcp, None, Some(&good)))
        .on_request(|b| [b"echo:".as_slice(), b].concat())
        .start()
        .unwrap();
    let addr = a.listen_addr();
    let view = a.view().map(|v| v.id());
    let secret = || Some(Secret::load(&good).unwrap().into());
    let none = Client::connect_with(&[addr], WAIT, None).expect_err("a client without the secret");
    assert!(none.to_string().contains("authentication required"), "{none}");
    let other = Secret::load(&keys.make("other")).unwrap();
    let wrong = Client::connect_with(&[addr], WAIT, Some(other.into())).expect_err("a client with another secret");
    assert!(wrong.to_string().contains("authentication failed"), "{wrong}");
    let ok = Client::connect_with(&[addr], WAIT, secret()).unwrap();
    assert_eq!(ok.request(b"x", WAIT).unwrap(), b"echo:x");
    // A client through a relay that flips one bit of its second request: the
    // member closes that session; the first answer came, the group goes on.
    let relay = Flipper::start(addr);
    let c = Client::connect_with(&[relay.addr], WAIT, secret()).unwrap();
    assert_eq!(c.request(b"first", WAIT).unwrap(), b"echo:first");
    relay.arm();
    assert!(c.request(b"second", Duration::from_secs(10)).is_err(), "a changed frame was answered");
    assert_eq!(ok.request(b"y", WAIT).unwrap(), b"echo:y", "another session goes on");
    assert_eq!(a.view().map(|v| v.id()), view);
    assert!(a.metrics().auth_refused >= 2, "{:?}", a.metrics());
}

#[test]
fn control_frames_travel_encrypted_with_a_secret_and_in_clear_without() {
    let keys = Keys::new("enc");
    let good = keys.make("good");
    for secret in [None, Some(&good)] {
        let name = format!("sece{}{}", std::process::id(), secret.is_some() as u8);
        let a = GroupBuilder::new(config(&name, Transport::Tcp, None, secret))
            .on_request(|b| [b"echo:".as_slice(), b].concat())
            .start()
            .unwrap();
        let relay = Flipper::start(a.listen_addr());
        let c = Client::connect_with(&[relay.addr], WAIT, secret.map(|s| Secret::load(s).unwrap().into())).unwrap();
        assert_eq!(c.request(b"marker-7b1c", WAIT).unwrap(), b"echo:marker-7b1c");
        let seen = relay.seen.lock().unwrap().clone();
        let found = seen.windows(11).any(|w| w == b"marker-7b1c");
        assert_eq!(found, secret.is_none(), "the request's body on the wire ({} bytes seen)", seen.len());
    }
}
