//! What the Group tests share: a member's config on loopback.

#[allow(dead_code)]
pub mod flipper;

use spindle_views::config::{Config, ConfigBuilder, Transport};
use std::net::SocketAddr;
use std::time::Duration;

/// Member `id` of group `name` over `t`, on a free loopback control port, joining
/// through `contact` if given, with short test timeouts (heartbeat 50 ms, failure
/// 400 ms); the caller adds what else it needs and builds it.
#[allow(dead_code)]
pub fn member_config(name: &str, id: u32, contact: Option<SocketAddr>, t: Transport) -> ConfigBuilder {
    let b = Config::builder(id, testkit::free_control_addr())
        .name(name)
        .transport(t)
        .timeouts(Duration::from_millis(50), Duration::from_millis(400));
    match contact {
        Some(c) => b.contact(c),
        None => b,
    }
}
