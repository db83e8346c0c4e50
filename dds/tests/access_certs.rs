//! A domain whose members and clients prove themselves with certificates of one
//! CA, under an access policy: members are held to it as the identity their
//! certificate names (a member's own writer and reader are checked, as its
//! clients' are), clients get what it grants their certificate's identity, and a
//! client of another CA is refused. Over tcp, every wait with a deadline.

use spindle_dds::{AccessPolicy, Action, ClientConfig, DdsConfig, DdsError, DomainClient, DomainParticipant, Qos};
use spindle_views::auth::Certificates;
use spindle_views::config::{Config, Transport};
use std::net::SocketAddr;
use std::time::Duration;
use testkit::certs::TestCa;

const WAIT: Duration = Duration::from_secs(30);

const POLICY: &str = r#"
[[rule]]
identities = ["node-a"]
topics = ["temperature"]
publish = true

[[rule]]
identities = ["*"]
topics = ["temperature"]
subscribe = true
"#;

fn member(ca: &TestCa, group: &str, me: &str, contact: Option<SocketAddr>) -> DomainParticipant {
    let f = ca.issue(me);
    let mut b = Config::builder(spindle_views::config::AUTO_ID, testkit::free_control_addr())
        .name(group)
        .transport(Transport::Tcp)
        .certificates(f.ca, f.cert, f.key, me)
        .timeouts(Duration::from_millis(50), Duration::from_millis(1000));
    if let Some(c) = contact {
        b = b.contact(c);
    }
    let mut cfg = DdsConfig::new(b.build().unwrap());
    cfg.access = Some(AccessPolicy::from_toml(POLICY).unwrap());
    DomainParticipant::new(cfg).unwrap()
}

fn client(ca: &TestCa, me: &str, contact: SocketAddr) -> Result<DomainClient, DdsError> {
    let f = ca.issue(me);
    let cfg = ClientConfig {
        credentials: Some(Certificates::load(&f.ca, &f.cert, &f.key, me).unwrap().into()),
        failover_timeout: WAIT,
        ..ClientConfig::new(vec![contact])
    };
    DomainClient::connect(cfg)
}

fn denied(r: Result<impl std::fmt::Debug, DdsError>, action: Action) -> bool {
    matches!(&r, Err(DdsError::Denied { topic, action: a }) if topic == "temperature" && *a == action)
}

#[test]
fn members_and_clients_are_held_to_the_policy_by_their_certificates() {
    let ca = TestCa::new("dds-access");
    let other = TestCa::new("dds-access-other");
    let group = format!("accc{}", std::process::id());
    let a = member(&ca, &group, "node-a", None);
    let b = member(&ca, &group, "node-b", Some(a.group().listen_addr()));
    assert!(a.group().wait_for_members(2, WAIT) && b.group().wait_for_members(2, WAIT));
    let qos = Qos::volatile(spindle_dds::History::KeepLast(10));

    // Members: node-a may publish, node-b only subscribe.
    let ta = a.topic::<f32>("temperature", qos).unwrap();
    let w = a.create_writer(&ta, qos).unwrap();
    let tb = b.topic::<f32>("temperature", qos).unwrap();
    let e = b.create_writer(&tb, qos);
    assert!(denied(e, Action::Publish), "node-b's writer");
    let rb = b.create_reader(&tb, qos).unwrap();

    // A client of the CA reads as its certificate's identity, and may not write.
    let dash = client(&ca, "dashboard", b.group().listen_addr()).unwrap();
    let td = dash.find_topic::<f32>("temperature").unwrap();
    assert!(denied(dash.create_writer(&td, qos), Action::Publish), "dashboard's writer");
    let rd = dash.create_reader(&td, qos).unwrap();
    w.write(&21.5).unwrap();
    assert_eq!(rb.take_n(1, WAIT).first().map(|s| s.data), Some(21.5));
    assert_eq!(rd.take_n(1, WAIT).first().map(|s| s.data), Some(21.5));

    // A client of another CA is refused.
    let stranger = client(&other, "dashboard", a.group().listen_addr()).err().map(|e| e.to_string());
    assert!(stranger.as_deref().is_some_and(|e| e.contains("authentication failed")), "{stranger:?}");
    assert_eq!(a.group().members().len(), 2, "no view change");
}
