//! A domain with a secret and an access policy: clients proving named identities
//! (keys derived from the group secret) publish and subscribe only what the policy
//! grants them, and are told which topic and action was denied; a client of the
//! group secret may do everything; a wrong identity key is refused; an identity
//! cannot be used to join as a member. Over tcp, every wait with a deadline.

use spindle_dds::{AccessPolicy, Action, ClientConfig, DdsConfig, DdsError, DomainClient, DomainParticipant, Qos};
use spindle_views::auth::Secret;
use spindle_views::config::{Config, Transport};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const POLICY: &str = r#"
[[rule]]
identities = ["thermometer"]
topics = ["temperature"]
publish = true

[[rule]]
identities = ["*"]
topics = ["temperature"]
subscribe = true
"#;

fn member(name: &str, id: u32, contact: Option<SocketAddr>, secret: &Path) -> DomainParticipant {
    let port = testkit::free_ports(1).unwrap()[0];
    let mut b = Config::builder(id, format!("127.0.0.1:{port}").parse().unwrap())
        .name(name)
        .transport(Transport::Tcp)
        .secret_file(secret)
        .timeouts(Duration::from_millis(50), Duration::from_millis(1000));
    if let Some(c) = contact {
        b = b.contact(c);
    }
    let mut cfg = DdsConfig::new(b.build().unwrap());
    cfg.access = Some(AccessPolicy::from_toml(POLICY).unwrap());
    DomainParticipant::new(cfg).unwrap()
}

fn client(contact: SocketAddr, key: &Path, identity: Option<&str>) -> Result<DomainClient, DdsError> {
    let cfg = ClientConfig {
        secret_file: Some(key.into()),
        identity: identity.map(Into::into),
        failover_timeout: WAIT,
        ..ClientConfig::new(vec![contact])
    };
    DomainClient::connect(cfg)
}

#[test]
fn named_identities_get_what_the_policy_grants_and_are_told_what_it_denies() {
    let dir = Dir(std::env::temp_dir().join(format!("dds-access-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    let group = dir.0.join("group.key");
    let secret = Secret::generate(&group).unwrap();
    let key_of = |name: &str| {
        let p = dir.0.join(format!("{name}.key"));
        secret.identity(name).unwrap().save(&p).unwrap();
        p
    };
    let (thermo_key, dash_key) = (key_of("thermometer"), key_of("dashboard"));
    let name = format!("acc{}", std::process::id());
    let a = member(&name, 0, None, &group);
    let b = member(&name, 1, Some(a.group().listen_addr()), &group);
    assert!(a.group().wait_for_members(2, WAIT) && b.group().wait_for_members(2, WAIT));
    let (at_a, at_b) = (a.group().listen_addr(), b.group().listen_addr());
    let qos = Qos::volatile(spindle_dds::History::KeepLast(10));

    let thermo = client(at_a, &thermo_key, Some("thermometer")).unwrap();
    let t = thermo.topic::<f32>("temperature", qos).unwrap();
    let w = thermo.create_writer(&t, qos).unwrap();
    let other = thermo.topic::<f32>("humidity", qos).err();
    assert!(
        matches!(&other, Some(DdsError::Denied { topic, action: Action::Subscribe }) if topic == "humidity"),
        "{other:?}"
    );

    let dash = client(at_b, &dash_key, Some("dashboard")).unwrap();
    let td = dash.find_topic::<f32>("temperature").unwrap();
    let denied = dash.create_writer(&td, qos).err();
    assert!(
        matches!(&denied, Some(DdsError::Denied { topic, action: Action::Publish }) if topic == "temperature"),
        "{denied:?}"
    );
    assert!(denied.unwrap().to_string().contains("publish denied"));
    let r = dash.create_reader(&td, qos).unwrap();
    w.write(&21.5).unwrap();
    assert_eq!(r.take_n(1, WAIT).first().map(|s| s.data), Some(21.5));

    // The group secret itself may do everything; members too.
    let full = client(at_a, &group, None).unwrap();
    let h = full.topic::<f32>("humidity", qos).unwrap();
    full.create_writer(&h, qos).unwrap();
    let ht = a.topic::<f32>("humidity", qos).unwrap();
    a.create_writer(&ht, qos).unwrap();

    // A key of another identity than the one named, or of another group, fails.
    let wrong = client(at_a, &dash_key, Some("thermometer")).err();
    assert!(wrong.as_ref().is_some_and(|e| e.to_string().contains("authentication failed")), "{wrong:?}");
    let stranger = dir.0.join("stranger.key");
    Secret::generate(&stranger).unwrap();
    assert!(client(at_a, &stranger, None).is_err());

    // An identity's key does not make a member.
    let port = testkit::free_ports(1).unwrap()[0];
    let mut cfg = Config::builder(9, format!("127.0.0.1:{port}").parse().unwrap())
        .name(&name)
        .transport(Transport::Tcp)
        .secret_file(&thermo_key)
        .contact(at_a)
        .build()
        .unwrap();
    cfg.security.identity = Some("thermometer".into());
    let e = DomainParticipant::new(DdsConfig::new(cfg)).err().map(|e| e.to_string());
    assert!(e.as_deref().is_some_and(|e| e.contains("security.identity")), "{e:?}");
    assert_eq!(a.group().members().len(), 2, "no view change");
}
