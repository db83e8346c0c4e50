//! A node's configuration: from a TOML file or built in code. Unknown keys and bad
//! values are errors that name the key.
//!
//! ```
//! use spindle_views::config::Config;
//! let cfg = Config::from_toml(r#"
//!     node_id = 3
//!     listen = "127.0.0.1:7003"
//!     contact = "127.0.0.1:7000"
//!     transport = "tcp"
//!     window = 128
//! "#).unwrap();
//! assert_eq!(cfg.window, Some(128));
//! // Without `window` a ring is sized in bytes for `max_msg` (2 MiB of slots).
//! assert_eq!(Config::from_toml("listen = \"127.0.0.1:7005\"").unwrap().ring_window(), 2016);
//! assert!(cfg.majority, "majority rule is on by default");
//!
//! let err = Config::from_toml("node_id = 1\nlisten = \"127.0.0.1:1\"\nwindwo = 4").unwrap_err();
//! assert!(err.to_string().contains("windwo"));
//!
//! // Without `node_id` the group gives one at join (see `Group::node`).
//! let auto = Config::from_toml("listen = \"127.0.0.1:7004\"\ncontact = \"127.0.0.1:7000\"").unwrap();
//! assert_eq!(auto.node_id, spindle_views::config::AUTO_ID);
//! ```

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use thiserror::Error;

/// The data-plane transport of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// Nodes are threads of one process.
    Mem,
    /// Nodes are processes on one host (the default).
    #[default]
    Shm,
    /// Nodes are processes on any hosts.
    Tcp,
    /// Nodes on hosts with RDMA devices (sst's `rdma` feature; see
    /// `spindle_sst::transport::rdma`). Setup goes over the data port, like tcp's.
    Rdma,
}

/// The IPv4 address other hosts reach this one at: the source address of the
/// route to a host off every local network, which is the address of the
/// interface the default route leaves by. `None` where there is no such route
/// (loopback only) or the host's only route is loopback.
///
/// The kernel chooses it when a UDP socket is connected; nothing is sent (a UDP
/// connect only records the peer). The peer is 203.0.113.1, reserved for
/// documentation (TEST-NET-3, RFC 5737), so normally on no local network: the
/// route to it is the default route.
pub fn reachable_ipv4() -> Option<std::net::Ipv4Addr> {
    let s = std::net::UdpSocket::bind((std::net::Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    s.connect((std::net::Ipv4Addr::new(203, 0, 113, 1), 9)).ok()?;
    match s.local_addr().ok()? {
        SocketAddr::V4(a) if !a.ip().is_unspecified() && !a.ip().is_loopback() => Some(*a.ip()),
        _ => None,
    }
}

/// One node's configuration (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The group's name (letters, digits, `-`, `_`; names the shm files and tells
    /// groups apart on tcp). Every member uses the same one.
    #[serde(default = "defaults::name")]
    pub name: String,
    /// This node's id, unique in the group; [`AUTO_ID`] (the default when the
    /// TOML leaves it out): the group gives one when this node joins (0 for the
    /// node that starts the group), never one a member of the group had before.
    #[serde(default = "defaults::node_id")]
    pub node_id: u32,
    /// Where this node's control plane listens; its data plane (tcp) listens on
    /// the next port. Port 0: the OS picks a free pair ([`crate::group::Group::listen_addr`]
    /// says which). The address is what the others connect to: on one host
    /// `127.0.0.1` (the default of [`Config::local`]), across hosts the address of
    /// the network the group shares.
    pub listen: SocketAddr,
    /// Any member of an existing group to join through. Absent: with
    /// [`Config::discovery`], look for the group on the local network and join it,
    /// or start it if nothing answers; without, start a new group.
    #[serde(default)]
    pub contact: Option<SocketAddr>,
    /// Find the group by UDP multicast beacons of its name (see
    /// `spindle_views::group::discovery`): a node without a contact looks for
    /// `discovery_wait_ms`, and every member answers lookers. One LAN segment (or
    /// one host) only: it does not cross routers. On by default.
    #[serde(default = "defaults::yes")]
    pub discovery: bool,
    /// The multicast address and port of the beacons; absent: one derived from the
    /// group name (239.255.x.y, port 17400-18399).
    #[serde(default)]
    pub discovery_addr: Option<std::net::SocketAddrV4>,
    /// How long a node without a contact looks for its group before it starts the
    /// group itself, in milliseconds (a running member answers within one round
    /// trip; the wait is what a node alone pays at start).
    #[serde(default = "defaults::discovery_wait_ms")]
    pub discovery_wait_ms: u64,
    /// Data-plane transport.
    #[serde(default)]
    pub transport: Transport,
    /// Slots per sender ring; `None` (the default) sizes the ring in bytes for
    /// `max_msg` (`spindle_smc::spec::auto_window`: 2 MiB of slots, 256 to 16,384 of
    /// them; 2,016 of the default 1 KB). Each member maps each sender's ring: set a
    /// number of slots where memory matters more than the rate.
    #[serde(default)]
    pub window: Option<usize>,
    /// Largest message in a ring slot, in bytes (slots are sized for it).
    #[serde(default = "defaults::max_msg")]
    pub max_msg: usize,
    /// Bytes of each sender's arena, where messages larger than `max_msg` go
    /// (default 64 MiB; 0: none). The largest message is the larger of the two.
    /// Every member maps every sender's arena; pages are touched only as used.
    #[serde(default = "defaults::arena")]
    pub arena: usize,
    /// Relay large messages member to member over tcp (the chain of Derecho's RDMC):
    /// a sender sends each payload once, to the next member, which passes it on, so
    /// its link carries one copy instead of one per member, at the cost of a hop per
    /// member in latency (default off; no effect on shm). Every member must set it
    /// alike.
    #[serde(default)]
    pub relay: bool,
    /// Heartbeat period, in milliseconds.
    #[serde(default = "defaults::heartbeat_ms")]
    pub heartbeat_ms: u64,
    /// A peer silent this long is suspected, in milliseconds.
    #[serde(default = "defaults::failure_timeout_ms")]
    pub failure_timeout_ms: u64,
    /// Predicate-thread spin budget, in microseconds. Left out: chosen from the
    /// host at each view (`spindle_sst::spin::auto_spin_us`, counting this host's
    /// members of the view): the short default while they have a core each, none
    /// once they outnumber its cores (their spinning threads would take the cores
    /// the others need).
    #[serde(default)]
    pub spin_us: Option<u64>,
    /// Once the predicate thread's passes have all done work for this many
    /// microseconds, it gives its core away after each further one (0: never;
    /// default 10, `spindle_sst::predicate::DEFAULT_BUSY_YIELD_US`; at most one
    /// second). On a host with fewer cores than busy threads (a sender
    /// and the members' predicate threads) this hands the core to the thread that
    /// makes the work instead of waiting for its time slice; see
    /// `spindle_sst::predicate::PollConfig::busy_yield`.
    #[serde(default = "defaults::busy_yield_us")]
    pub busy_yield_us: u64,
    /// Latency first: a thread that waits for a delivery (a DDS reader's `wait` and
    /// `take_n`, `Group::wait_running_passes`) runs this node's predicate passes
    /// itself while it waits, and the predicate thread steps aside
    /// (`spindle_sst::predicate::Lender`). One spinning thread per node instead of
    /// two, and no wake-up between a delivery and its waiter: round trips are
    /// shorter on a host with few cores. A waiting thread spins up to 1 ms before
    /// it sleeps; work that arrives after the last wait is taken up by the
    /// predicate thread within about 10 ms (twice `PollConfig::lend_linger`).
    /// Upcalls and listeners then run on the waiting thread (docs/limits.md).
    /// Default off.
    #[serde(default)]
    pub latency_first: bool,
    /// A member that finds itself in a minority stops instead of installing a view.
    #[serde(default = "defaults::majority")]
    pub majority: bool,
    /// A member the others removed while it was alive (a stall past the failure
    /// timeout, a minority side of a partition) joins the group again by itself,
    /// with the same node id, and gets the state as any joiner does
    /// ([`crate::group::Group::rejoining`], `Metrics::rejoins`). `false`: it stops
    /// for good, as a crashed member would.
    #[serde(default = "defaults::yes")]
    pub rejoin: bool,
    /// A directory of this member's own (one member per directory) where it keeps
    /// who it is: its node id and the last view it installed. A member started
    /// again on it with no node id takes that id back, and if the group it left
    /// lost its majority meanwhile, it restores the group with the members that
    /// are still there (see `spindle_views::group::restart`). Absent: nothing is kept, and
    /// a restarted member is a new one.
    #[serde(default)]
    pub state_dir: Option<std::path::PathBuf>,
    /// `rdma`: the device's name (`ibv_devices`); the first device if absent.
    #[serde(default)]
    pub rdma_device: Option<String>,
    /// `rdma`: the device port.
    #[serde(default = "defaults::rdma_port")]
    pub rdma_port: u8,
    /// `rdma`: the port's GID table index (RoCE v2 over IPv4 is often 1 or 3).
    #[serde(default)]
    pub gid_index: u8,
    /// Who may take part (see [`Security`]).
    #[serde(default)]
    pub security: Security,
}

mod builder;
mod security;
pub use builder::ConfigBuilder;
pub use security::{Security, CERT_ENV, CRL_ENV, DEFAULT_RECHECK_MS, SECRET_ENV};

/// True for a valid group name: 1-40 letters, digits, `-` or `_`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 40 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The node id that asks the group for one (see [`Config::node_id`]).
pub const AUTO_ID: u32 = u32::MAX;

mod defaults {
    pub fn node_id() -> u32 {
        super::AUTO_ID
    }
    pub fn name() -> String {
        "spindle".into()
    }
    pub fn max_msg() -> usize {
        1024
    }
    pub fn arena() -> usize {
        64 << 20
    }
    pub fn heartbeat_ms() -> u64 {
        100
    }
    pub fn failure_timeout_ms() -> u64 {
        1000
    }
    pub fn busy_yield_us() -> u64 {
        spindle_sst::predicate::DEFAULT_BUSY_YIELD_US
    }
    pub fn majority() -> bool {
        true
    }
    pub fn yes() -> bool {
        true
    }
    pub fn discovery_wait_ms() -> u64 {
        500
    }
    pub fn rdma_port() -> u8 {
        1
    }
}

/// Why a configuration was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    /// The TOML did not parse, or has unknown keys or wrongly typed values.
    #[error("config: {0}")]
    Syntax(String),
    /// A value is out of range.
    #[error("config: `{key}` {why}")]
    Invalid {
        /// The key.
        key: &'static str,
        /// What is wrong with its value.
        why: String,
    },
    /// The file could not be read.
    #[error("config file {path}: {why}")]
    File {
        /// The path.
        path: String,
        /// The error.
        why: String,
    },
}

fn invalid(key: &'static str, why: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key, why: why.into() }
}

impl Config {
    /// Parses and checks a TOML document.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string().trim().to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads, parses and checks a TOML file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::File { path: path.display().to_string(), why: e.to_string() })?;
        Config::from_toml(&text)
    }

    /// A builder with the defaults and a node id the group gives ([`AUTO_ID`]).
    pub fn auto_builder(listen: SocketAddr) -> ConfigBuilder {
        Config::builder(AUTO_ID, listen)
    }

    /// A builder for a member on this host that needs nothing chosen by hand: no
    /// node id (the group gives one), control and data ports picked by the OS on
    /// 127.0.0.1, and no contact (discovery finds the group, or it starts one).
    pub fn local() -> ConfigBuilder {
        Config::builder(AUTO_ID, SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// A builder for a member that others on its network reach with nothing
    /// chosen by hand: as [`Config::local`], but on the address of the interface
    /// the default route leaves by ([`reachable_ipv4`]), so the same command forms
    /// one group on one host or across the hosts of a LAN. A host with no route
    /// but loopback gets 127.0.0.1.
    pub fn network() -> ConfigBuilder {
        let ip = reachable_ipv4().unwrap_or(std::net::Ipv4Addr::LOCALHOST);
        Config::builder(AUTO_ID, SocketAddr::from((ip, 0)))
    }

    /// A builder with the defaults, for configuration in code.
    pub fn builder(node_id: u32, listen: SocketAddr) -> ConfigBuilder {
        ConfigBuilder(Config {
            name: defaults::name(),
            node_id,
            listen,
            contact: None,
            discovery: defaults::yes(),
            discovery_addr: None,
            discovery_wait_ms: defaults::discovery_wait_ms(),
            transport: Transport::default(),
            window: None,
            max_msg: defaults::max_msg(),
            arena: defaults::arena(),
            relay: false,
            heartbeat_ms: defaults::heartbeat_ms(),
            failure_timeout_ms: defaults::failure_timeout_ms(),
            spin_us: None,
            busy_yield_us: defaults::busy_yield_us(),
            latency_first: false,
            majority: defaults::majority(),
            rejoin: defaults::yes(),
            state_dir: None,
            rdma_device: None,
            rdma_port: defaults::rdma_port(),
            gid_index: 0,
            security: Security::default(),
        })
    }

    /// Checks ranges and consistency.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !valid_name(&self.name) {
            return Err(invalid("name", "must be 1-40 letters, digits, '-' or '_'"));
        }
        if self.listen.port() == u16::MAX {
            return Err(invalid("listen", "port must leave room for the data port (port + 1)"));
        }
        let explicit = self.node_id != AUTO_ID;
        if explicit
            && matches!(self.transport, Transport::Mem | Transport::Shm)
            && self.node_id >= spindle_sst::transport::MAX_NODE_ID
        {
            return Err(invalid(
                "node_id",
                format!("must be below {} for mem and shm", spindle_sst::transport::MAX_NODE_ID),
            ));
        }
        if self.window.is_some_and(|w| w == 0 || w > spindle_smc::spec::MAX_WINDOW) {
            return Err(invalid("window", format!("must be in 1..={}", spindle_smc::spec::MAX_WINDOW)));
        }
        if self.max_msg == 0 || self.max_msg > spindle_smc::spec::MAX_MSG {
            return Err(invalid("max_msg", format!("must be in 1..={}", spindle_smc::spec::MAX_MSG)));
        }
        if self.arena > spindle_smc::spec::MAX_ARENA {
            return Err(invalid("arena", format!("must be at most {}", spindle_smc::spec::MAX_ARENA)));
        }
        if self.heartbeat_ms == 0 {
            return Err(invalid("heartbeat_ms", "must be positive"));
        }
        if self.failure_timeout_ms < 2 * self.heartbeat_ms {
            return Err(invalid(
                "failure_timeout_ms",
                "must be at least twice heartbeat_ms, or every hiccup is a failure",
            ));
        }
        if self.rdma_port == 0 {
            return Err(invalid("rdma_port", "ports are numbered from 1"));
        }
        if self.spin_us.is_some_and(|s| s > 1_000_000) {
            return Err(invalid("spin_us", "must be at most 1000000 (one second)"));
        }
        if self.busy_yield_us > 1_000_000 {
            return Err(invalid("busy_yield_us", "must be at most 1000000 (one second)"));
        }
        if let Some(a) = self.discovery_addr {
            if !a.ip().is_multicast() || a.port() == 0 {
                return Err(invalid("discovery_addr", "must be an IPv4 multicast address with a port"));
            }
        }
        if self.discovery_wait_ms > 60_000 {
            return Err(invalid("discovery_wait_ms", "must be at most 60000 (one minute)"));
        }
        if self.contact == Some(self.listen) {
            return Err(invalid("contact", "is this node's own listen address"));
        }
        Ok(())
    }

    /// Heartbeat period.
    pub fn heartbeat(&self) -> Duration {
        Duration::from_millis(self.heartbeat_ms)
    }

    /// Failure timeout.
    pub fn failure_timeout(&self) -> Duration {
        Duration::from_millis(self.failure_timeout_ms)
    }

    /// Slots per sender ring: `window`, or the byte-sized default for `max_msg`.
    pub fn ring_window(&self) -> usize {
        self.window.unwrap_or_else(|| spindle_smc::spec::auto_window(self.max_msg))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "node_id = 1\nlisten = \"127.0.0.1:7001\"\n";

    #[test]
    fn defaults_fill_in() {
        let c = Config::from_toml(BASE).unwrap();
        assert_eq!(
            (c.transport, c.window, c.max_msg, c.heartbeat_ms, c.failure_timeout_ms),
            (Transport::Shm, None, 1024, 100, 1000)
        );
        assert!(c.majority && c.contact.is_none());
        assert_eq!(c, Config::builder(1, "127.0.0.1:7001".parse().unwrap()).build().unwrap());
    }

    #[test]
    fn rdma_keys_parse_and_port_zero_is_refused() {
        let c = Config::from_toml(&format!(
            "{BASE}transport = \"rdma\"\nrdma_device = \"mlx5_0\"\nrdma_port = 2\ngid_index = 3\n"
        ))
        .unwrap();
        assert_eq!(c.transport, Transport::Rdma);
        assert_eq!((c.rdma_device.as_deref(), c.rdma_port, c.gid_index), (Some("mlx5_0"), 2, 3));
        assert_eq!(Config::from_toml(BASE).unwrap().rdma_port, 1, "port 1 by default");
        let e = Config::from_toml(&format!("{BASE}rdma_port = 0\n")).unwrap_err();
        assert!(e.to_string().contains("rdma_port"), "{e}");
    }

    #[test]
    fn every_key_parses() {
        let c = Config::from_toml(&format!(
            "{BASE}contact = \"127.0.0.1:7000\"\ntransport = \"tcp\"\nwindow = 8\nmax_msg = 64\nheartbeat_ms = 50\nfailure_timeout_ms = 500\nspin_us = 0\nbusy_yield_us = 0\nmajority = false\nrejoin = false\n"
        ))
        .unwrap();
        assert_eq!(c.contact, Some("127.0.0.1:7000".parse().unwrap()));
        assert_eq!(
            (c.transport, c.window, c.max_msg, c.spin_us, c.busy_yield_us, c.majority),
            (Transport::Tcp, Some(8), 64, Some(0), 0, false)
        );
        assert!(!c.rejoin && Config::from_toml(BASE).unwrap().rejoin, "rejoin is on unless turned off");
        assert_eq!(
            Config::from_toml(BASE).unwrap().busy_yield_us,
            spindle_sst::predicate::DEFAULT_BUSY_YIELD_US,
            "the busy yield is on unless turned off"
        );
        let d = Config::from_toml(&format!(
            "{BASE}discovery = false\ndiscovery_addr = \"239.255.1.2:17500\"\ndiscovery_wait_ms = 200\n"
        ))
        .unwrap();
        assert_eq!((d.discovery, d.discovery_wait_ms), (false, 200));
        assert_eq!(d.discovery_addr, Some("239.255.1.2:17500".parse().unwrap()));
        assert_eq!(c.failure_timeout(), Duration::from_millis(500));
    }

    #[test]
    fn errors_name_the_key() {
        let cases: &[(&str, &str)] = &[
            ("wndow = 3", "wndow"),
            ("window = 0", "window"),
            ("window = -1", "window"),
            ("max_msg = 0", "max_msg"),
            ("arena = 2000000000", "arena"),
            ("transport = \"udp\"", "udp"),
            ("heartbeat_ms = 0", "heartbeat_ms"),
            ("heartbeat_ms = 600", "failure_timeout_ms"),
            ("spin_us = 5000000", "spin_us"),
            ("busy_yield_us = 5000000", "busy_yield_us"),
            ("contact = \"127.0.0.1:7001\"", "contact"),
            ("contact = \"not an address\"", "contact"),
            ("majority = \"yes\"", "majority"),
            ("discovery_addr = \"10.0.0.1:17500\"", "discovery_addr"),
            ("discovery_wait_ms = 70000", "discovery_wait_ms"),
        ];
        for (line, key) in cases {
            let err = Config::from_toml(&format!("{BASE}{line}\n")).unwrap_err().to_string();
            assert!(err.contains(key), "{line:?} gave {err:?}, which does not name {key:?}");
        }
        assert_eq!(Config::from_toml("listen = \"127.0.0.1:1\"").unwrap().node_id, AUTO_ID, "given by the group");
        let big = Config::from_toml("node_id = 5000\nlisten = \"127.0.0.1:1\"").unwrap_err().to_string();
        assert!(big.contains("node_id"), "{big}");
        assert!(Config::from_toml("node_id = 5000\nlisten = \"127.0.0.1:1\"\ntransport = \"tcp\"").is_ok());
    }

    #[test]
    fn builder_checks_like_a_file() {
        let b = Config::builder(2, "127.0.0.1:7002".parse().unwrap());
        assert!(b.clone().window(0).build().is_err());
        assert!(b.clone().timeouts(Duration::from_millis(100), Duration::from_millis(150)).build().is_err());
        let c = b.transport(Transport::Mem).majority(false).spin(Duration::ZERO).build().unwrap();
        assert_eq!((c.transport, c.majority, c.spin_us), (Transport::Mem, false, Some(0)));
    }

    #[test]
    fn missing_file_is_a_clear_error() {
        let e = Config::from_file("/nonexistent/spindle.toml").unwrap_err();
        assert!(matches!(e, ConfigError::File { .. }), "{e}");
    }
}
