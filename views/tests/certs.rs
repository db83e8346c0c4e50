//! A group whose members and clients prove themselves with certificates of one
//! CA (mutual TLS at every control connection, sealed data links after): members
//! of the CA join and exchange messages; a certificate of another CA, none, or a
//! secret is refused and told why; only the identities the group names may join,
//! others of the CA may be clients; control frames travel encrypted. Over tcp with
//! a contact and over shm with discovery. Every wait has a deadline.

mod common;

use common::flipper::Flipper;
use spindle_views::auth::{AuthError, Certificates, Credentials, Secret};
use spindle_views::client::Client;
use spindle_views::config::{Config, Transport};
use spindle_views::group::{Group, GroupBuilder, StartError};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::certs::TestCa;

const WAIT: Duration = Duration::from_secs(30);

/// Certificates of `ca` for `name`, loaded.
fn credentials(ca: &TestCa, name: &str) -> Credentials {
    let f = ca.issue(name);
    Certificates::load(&f.ca, &f.cert, &f.key, name).unwrap().into()
}

type Log = Arc<Mutex<Vec<Vec<u8>>>>;

/// A member's config: with a certificate of `ca` for `name`, or none.
fn config(group: &str, t: Transport, contact: Option<SocketAddr>, cert: Option<(&TestCa, &str)>) -> Config {
    let mut b = common::member_config(group, spindle_views::config::AUTO_ID, contact, t).discovery(contact.is_none());
    if let Some((ca, name)) = cert {
        let f = ca.issue(name);
        b = b.certificates(f.ca, f.cert, f.key, name);
    }
    b.build().unwrap()
}

fn start(cfg: Config) -> (Group, Log) {
    let log: Log = Arc::default();
    let l = log.clone();
    let g = GroupBuilder::new(cfg)
        .on_deliver(0, move |d| l.lock().unwrap().push(d.data.to_vec()))
        .on_request(|b| [b"echo:".as_slice(), b].concat())
        .start()
        .unwrap();
    (g, log)
}

fn two(gs: &[&Group]) -> bool {
    testkit::poll_until(WAIT, Duration::from_millis(5), || {
        gs.iter().all(|g| g.members().len() == 2) && gs[0].view().map(|v| v.id()) == gs[1].view().map(|v| v.id())
    })
}

/// Starts a member that must be refused: how long it took and why.
fn refused(cfg: Config) -> (Duration, StartError) {
    let t0 = Instant::now();
    let e = GroupBuilder::new(cfg).start().expect_err("a member without the right certificate joined");
    (t0.elapsed(), e)
}

fn members_join_and_others_are_refused(t: Transport, tag: &str, contact: impl Fn(&Group) -> Option<SocketAddr>) {
    let ca = TestCa::new(tag);
    let other = TestCa::new(&format!("{tag}-other"));
    let name = format!("cert{tag}{}", std::process::id());
    let (a, la) = start(config(&name, t, None, Some((&ca, "node-a"))));
    let (b, lb) = start(config(&name, t, contact(&a), Some((&ca, "node-b"))));
    assert!(two(&[&a, &b]), "{:?} {:?}", a.view(), b.view());
    // Messages flow both ways over links each keyed by its own TLS handshake.
    a.send(0, b"from a").unwrap();
    b.send(0, b"from b").unwrap();
    let both = |l: &Log| l.lock().unwrap().len() == 2;
    assert!(testkit::poll_until(WAIT, Duration::from_millis(5), || both(&la) && both(&lb)), "messages not delivered");
    assert_eq!(*la.lock().unwrap(), *lb.lock().unwrap(), "one order at both");
    assert_eq!(b.request(a.node(), b"q", WAIT).unwrap(), b"echo:q");
    let view = a.view().map(|v| v.id());

    let (took, e) = refused(config(&name, t, contact(&a), Some((&other, "node-x"))));
    assert!(matches!(e, StartError::Auth { why: AuthError::Failed, .. }), "another CA: {e}");
    assert!(e.to_string().contains("authentication failed"), "{e}");
    assert!(took < Duration::from_secs(10), "told after {took:?}");
    let (took, e) = refused(config(&name, t, contact(&a), None));
    assert!(matches!(e, StartError::Auth { why: AuthError::Required, .. }), "no certificate: {e}");
    assert!(took < Duration::from_secs(10), "told after {took:?}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(a.view().map(|v| v.id()), view, "the group saw no view change");
    assert_eq!((a.members().len(), b.members().len()), (2, 2));
}

#[test]
fn members_of_the_ca_join_over_tcp_with_a_contact_and_others_are_refused() {
    members_join_and_others_are_refused(Transport::Tcp, "tcp", |a| Some(a.listen_addr()));
}

#[test]
fn members_of_the_ca_join_over_shm_by_discovery_and_others_are_refused() {
    members_join_and_others_are_refused(Transport::Shm, "shm", |_| None);
}

#[test]
fn a_secret_where_certificates_are_wanted_is_refused_and_told_why() {
    let ca = TestCa::new("kind");
    let name = format!("certk{}", std::process::id());
    let (a, _) = start(config(&name, Transport::Tcp, None, Some((&ca, "node-a"))));
    let key = ca.dir().join("group.key");
    Secret::generate(&key).unwrap();
    let cfg = common::member_config(&name, spindle_views::config::AUTO_ID, Some(a.listen_addr()), Transport::Tcp)
        .secret_file(&key)
        .build()
        .unwrap();
    let (_, e) = refused(cfg);
    assert!(matches!(e, StartError::Auth { why: AuthError::NoSecretThere, .. }), "{e}");
    assert!(e.to_string().contains("takes certificates"), "{e}");
    // And certificates where a secret is wanted.
    let name2 = format!("certs{}", std::process::id());
    let cfg = common::member_config(&name2, spindle_views::config::AUTO_ID, None, Transport::Tcp)
        .secret_file(&key)
        .build()
        .unwrap();
    let (s, _) = start(cfg);
    let (_, e) = refused(config(&name2, Transport::Tcp, Some(s.listen_addr()), Some((&ca, "node-b"))));
    assert!(matches!(e, StartError::Auth { why: AuthError::OtherKind, .. }), "{e}");
}

#[test]
fn only_named_members_join_and_other_identities_of_the_ca_are_clients() {
    let ca = TestCa::new("roles");
    let other = TestCa::new("roles-other");
    let name = format!("certr{}", std::process::id());
    let members = |n: &str| {
        let f = ca.issue(n);
        common::member_config(&name, spindle_views::config::AUTO_ID, None, Transport::Tcp)
            .discovery(false)
            .certificates(f.ca, f.cert, f.key, n)
    };
    let mut cfg = members("node-a").build().unwrap();
    cfg.security.members = Some(vec!["node-a".into(), "node-b".into()]);
    let (a, _) = start(cfg);
    let addr = a.listen_addr();
    let mut cfg = members("node-b").contact(addr).build().unwrap();
    cfg.security.members = Some(vec!["node-a".into(), "node-b".into()]);
    let (b, _) = start(cfg);
    assert!(two(&[&a, &b]));
    let view = a.view().map(|v| v.id());
    // An identity of the CA that is not a member's may not join...
    let cfg = members("dashboard").contact(addr).build().unwrap();
    let (took, e) = refused(cfg);
    assert!(matches!(e, StartError::Auth { why: AuthError::ClientOnly, .. }), "{e}");
    assert!(took < Duration::from_secs(10), "told after {took:?}");
    // ...but may open a client session, as itself.
    let c = Client::connect_with(&[addr], WAIT, Some(credentials(&ca, "dashboard"))).unwrap();
    assert_eq!(c.request(b"x", WAIT).unwrap(), b"echo:x");
    let none = Client::connect_with(&[addr], WAIT, None).expect_err("a client without a certificate");
    assert!(none.to_string().contains("authentication required"), "{none}");
    let wrong =
        Client::connect_with(&[addr], WAIT, Some(credentials(&other, "dashboard"))).expect_err("another CA's client");
    assert!(wrong.to_string().contains("authentication failed"), "{wrong}");
    assert_eq!(a.view().map(|v| v.id()), view, "the group saw no view change");
}

#[test]
fn frames_after_the_certificate_handshake_are_encrypted_and_a_changed_one_closes_its_link() {
    let ca = TestCa::new("enc");
    let name = format!("certe{}", std::process::id());
    let (a, _) = start(config(&name, Transport::Tcp, None, Some((&ca, "node-a"))));
    let view = a.view().map(|v| v.id());
    let relay = Flipper::start(a.listen_addr());
    let c = Client::connect_with(&[relay.addr], WAIT, Some(credentials(&ca, "client-1"))).unwrap();
    assert_eq!(c.request(b"marker-7b1c", WAIT).unwrap(), b"echo:marker-7b1c");
    let seen = relay.seen.lock().unwrap().clone();
    assert!(seen.len() > 500, "a handshake and two frames: {} bytes", seen.len());
    assert!(!seen.windows(11).any(|w| w == b"marker-7b1c"), "the request's body crossed in clear");
    relay.arm();
    assert!(c.request(b"second", Duration::from_secs(10)).is_err(), "a changed frame was answered");
    let ok = Client::connect_with(&[a.listen_addr()], WAIT, Some(credentials(&ca, "client-2"))).unwrap();
    assert_eq!(ok.request(b"y", WAIT).unwrap(), b"echo:y", "another session goes on");
    assert_eq!(a.view().map(|v| v.id()), view);
}

#[test]
fn a_revoked_certificate_cannot_join_or_connect_and_the_list_is_read_again_when_it_changes() {
    let ca = TestCa::new("crl");
    let name = format!("certv{}", std::process::id());
    let revoked = ca.issue("node-c");
    let crl = ca.revoke(&["node-c"]);
    let member = |f: testkit::certs::Issued, n: &str, contact: Option<SocketAddr>| {
        common::member_config(&name, spindle_views::config::AUTO_ID, contact, Transport::Tcp)
            .discovery(false)
            .certificates(f.ca, f.cert, f.key, n)
            .revocation_list(&crl)
            .build()
            .unwrap()
    };
    let (a, _) = start(member(ca.issue("node-a"), "node-a", None));
    let addr = a.listen_addr();
    let (b, _) = start(member(ca.issue("node-b"), "node-b", Some(addr)));
    assert!(two(&[&a, &b]));
    let view = a.view().map(|v| v.id());
    // Revoked before it started: refused, and told so within seconds.
    let (took, e) = refused(member(revoked, "node-c", Some(addr)));
    assert!(matches!(e, StartError::Auth { why: AuthError::Revoked, .. }), "{e}");
    assert!(e.to_string().contains("revoked"), "{e}");
    assert!(took < Duration::from_secs(10), "told after {took:?}");
    // A client revoked while the group runs: served before, refused after.
    let dash = credentials(&ca, "dashboard");
    let c = Client::connect_with(&[addr], WAIT, Some(dash.clone())).unwrap();
    assert_eq!(c.request(b"x", WAIT).unwrap(), b"echo:x");
    ca.revoke(&["node-c", "dashboard"]);
    let e = Client::connect_with(&[addr], WAIT, Some(dash)).expect_err("a revoked client");
    assert!(e.to_string().contains("revoked"), "{e}");
    let ok = Client::connect_with(&[addr], WAIT, Some(credentials(&ca, "monitor"))).unwrap();
    assert_eq!(ok.request(b"y", WAIT).unwrap(), b"echo:y", "a certificate the list does not name");
    assert_eq!(a.view().map(|v| v.id()), view, "the group saw no view change");
    assert_eq!((a.members().len(), b.members().len()), (2, 2));
}

/// Three members over tcp with certificates and a list; `checks` says which of them
/// check the others' certificates again (every 300 ms). Revokes member c's
/// certificate while the group runs: a and b go on without c, and c stops saying
/// its certificate is revoked (and `says`).
fn revoked_while_running(tag: &str, checks: [bool; 3], says: &str) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let ca = TestCa::new(tag);
    let name = format!("{tag}{}", std::process::id());
    let crl = ca.revoke(&[]);
    let member = |n: &str, contact: Option<SocketAddr>, check: bool| {
        let f = ca.issue(n);
        common::member_config(&name, spindle_views::config::AUTO_ID, contact, Transport::Tcp)
            .discovery(false)
            .certificates(f.ca, f.cert, f.key, n)
            .revocation_list(&crl)
            .certificate_recheck(Duration::from_millis(if check { 300 } else { 0 }))
            .build()
            .unwrap()
    };
    let (a, log_a) = start(member("node-a", None, checks[0]));
    let (b, _) = start(member("node-b", Some(a.listen_addr()), checks[1]));
    let (c, _) = start(member("node-c", Some(a.listen_addr()), checks[2]));
    let three = || [&a, &b, &c].iter().all(|g| g.members().len() == 3);
    assert!(testkit::poll_until(WAIT, Duration::from_millis(5), three));
    let before = a.view().map(|v| v.id());
    std::thread::sleep(Duration::from_secs(1)); // a few checks pass: nothing changes
    assert_eq!(a.view().map(|v| v.id()), before, "valid certificates remove no one");
    ca.revoke(&["node-c"]);
    assert!(two(&[&a, &b]), "a and b go on without c: {:?} {:?}", a.members(), b.members());
    assert!(!a.members().contains(&c.node()));
    let stopped = testkit::poll_until(WAIT, Duration::from_millis(10), || c.stopped().is_some());
    assert!(stopped, "c stops");
    let why = c.stopped().unwrap();
    assert!(why.contains("revoked") && why.contains(says), "{why}");
    b.send(0, b"after").unwrap();
    assert!(testkit::poll_until(WAIT, Duration::from_millis(5), || log_a
        .lock()
        .unwrap()
        .iter()
        .any(|m| m == b"after")));
}

#[test]
fn a_member_revoked_while_it_runs_is_removed_by_the_others_checks_and_stops_when_refused_back() {
    // c checks no one: the others' checks remove it, and its rejoin is refused.
    revoked_while_running("crl-others", [true, true, false], "then join refused by");
}

#[test]
fn a_member_revoked_while_it_runs_stops_when_its_own_check_is_refused() {
    // Only c checks: refused by a, it stops, and a and b see it gone.
    revoked_while_running("crl-self", [false, false, true], "refused this member's certificate");
}

#[test]
fn a_client_revoked_while_its_session_lasts_is_dropped_by_the_member_s_check() {
    let ca = TestCa::new("crl-client");
    let crl = ca.revoke(&[]);
    let f = ca.issue("node-a");
    let cfg = common::member_config(&format!("certcl{}", std::process::id()), 0, None, Transport::Tcp)
        .discovery(false)
        .certificates(f.ca, f.cert, f.key, "node-a")
        .revocation_list(&crl)
        .certificate_recheck(Duration::from_millis(300))
        .build()
        .unwrap();
    let (a, _) = start(cfg);
    let addr = a.listen_addr();
    let dash = credentials(&ca, "dashboard");
    let c = Client::connect_with(&[addr], WAIT, Some(dash.clone())).unwrap();
    let m = Client::connect_with(&[addr], WAIT, Some(credentials(&ca, "monitor"))).unwrap();
    std::thread::sleep(Duration::from_secs(1)); // a few checks pass: nothing changes
    assert_eq!(c.request(b"x", WAIT).unwrap(), b"echo:x", "a valid certificate keeps its session");
    ca.revoke(&["dashboard"]);
    let mut last = Ok(Vec::new());
    let dropped = testkit::poll_until(WAIT, Duration::from_millis(50), || {
        last = c.request(b"x", Duration::from_secs(2));
        last.is_err()
    });
    assert!(dropped, "the revoked client's session goes on: {last:?}");
    match last {
        Err(spindle_views::client::ClientError::Dropped(why)) => assert!(why.contains("revoked"), "{why}"),
        other => panic!("expected a drop saying why, got {other:?}"),
    }
    let e = Client::connect_with(&[addr], WAIT, Some(dash)).expect_err("a revoked client connects again");
    assert!(e.to_string().contains("revoked"), "{e}");
    assert_eq!(m.request(b"y", WAIT).unwrap(), b"echo:y", "a client the list does not name keeps its session");
}
