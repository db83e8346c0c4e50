//! Participants as threads of one process for the dds tests: one per node id,
//! fast failure detection, every wait bounded.
#![allow(dead_code)]

use spindle_dds::DdsConfig;
use spindle_dds::DomainParticipant;
use spindle_views::config::{Config, ConfigBuilder, Transport};
use std::net::SocketAddr;
use std::time::Duration;

pub const WAIT: Duration = Duration::from_secs(30);

pub fn participant(domain: &str, id: u32, contact: Option<SocketAddr>, t: Transport) -> DomainParticipant {
    participant_with(domain, id, contact, t, |b| b)
}

/// [`participant`] with more settings on its group's config.
pub fn participant_with(
    domain: &str,
    id: u32,
    contact: Option<SocketAddr>,
    t: Transport,
    more: impl FnOnce(ConfigBuilder) -> ConfigBuilder,
) -> DomainParticipant {
    let mut b = Config::builder(id, testkit::free_control_addr())
        .name(domain)
        .transport(t)
        .timeouts(Duration::from_millis(50), Duration::from_millis(500));
    if let Some(c) = contact {
        b = b.contact(c);
    }
    let mut cfg = DdsConfig::new(more(b).build().unwrap());
    cfg.log_dir = std::env::temp_dir().join(format!("dds-test-{}", std::process::id()));
    DomainParticipant::new(cfg).unwrap()
}

pub fn domain(name: &str, n: u32, t: Transport) -> Vec<DomainParticipant> {
    let first = participant(name, 0, None, t);
    let contact = Some(first.group().listen_addr());
    let mut all = vec![first];
    for id in 1..n {
        all.push(participant(name, id, contact, t));
    }
    assert!(all[0].group().wait_for_members(n as usize, WAIT));
    all
}
