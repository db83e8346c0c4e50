//! A member of a store started with nothing chosen by hand, as the demo and
//! `spindle kv serve` start one: discovery finds the store's group on the local
//! network (or this member founds it), the member keeps its id, log and store in a
//! data directory of its own, and it answers [`crate::remote::KvClient`]s.
//!
//! - Data directory: `data_dir` if given, else the first free `slot-N` under
//!   `$SPINDLE_DATA_DIR/kv/<name>` (or `~/.local/share/spindle/kv/<name>`; see
//!   [`spindle_views::group::restart::claim_slot`]): a member killed and started
//!   again with the same settings finds its slot and comes back as itself.
//! - Node id: `id` if given, else the one kept in the data directory, else a
//!   random one below 1024 (a Tailwind member needs its id before it starts: its
//!   segment files go by it). The group refuses an id a member holds; a random one
//!   refused is replaced by another, up to [`ID_TRIES`] times.

use crate::remote::Handler;
use crate::{Store, StoreError};
use spindle_tailwind::service::{Ack, StartError, TailwindConfig, TailwindLog};
use spindle_views::config::{Config, ConfigError, Transport};
use spindle_views::group::restart::{self, StateDirError};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Random ids a new member tries before it gives up.
pub const ID_TRIES: usize = 4;

/// How to start a member (see the module docs); [`MemberConfig::new`] gives the
/// defaults.
#[derive(Debug, Clone)]
pub struct MemberConfig {
    /// The store's name (its group's): members of one store use the same.
    pub name: String,
    /// The data plane: shm (one host, the default) or tcp.
    pub transport: Transport,
    /// The address to listen on and be reached at (`None`: the default route's
    /// interface, or 127.0.0.1 where there is none).
    pub ip: Option<Ipv4Addr>,
    /// Control port (the data port is the next); 0: the OS picks.
    pub port: u16,
    /// Join through this member instead of discovery.
    pub contact: Option<SocketAddr>,
    /// This member's node id (`None`: kept, or random).
    pub id: Option<u32>,
    /// Where it keeps its id, log and store (`None`: a slot, see the module docs).
    pub data_dir: Option<PathBuf>,
    /// The group's secret file (`None`: `SPINDLE_SECRET_FILE`'s, if set).
    pub secret_file: Option<PathBuf>,
    /// Copies of the log (the first members of the view hold them).
    pub replicas: usize,
    /// When a put is acknowledged: once every copy holds it in memory, or also
    /// once a majority of them synced it to disk (see the crate docs).
    pub ack: Ack,
    /// The failure timeout.
    pub failure_timeout: Duration,
}

impl MemberConfig {
    /// The defaults for store `name`: shm, discovery, a slot, 3 replicas acked in
    /// memory, a 1 s failure timeout.
    pub fn new(name: &str) -> MemberConfig {
        MemberConfig {
            name: name.into(),
            transport: Transport::Shm,
            ip: None,
            port: 0,
            contact: None,
            id: None,
            data_dir: None,
            secret_file: None,
            replicas: 3,
            ack: Ack::Memory,
            failure_timeout: Duration::from_secs(1),
        }
    }
}

/// Why a member did not start.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    /// The data directory could not be claimed or read.
    #[error(transparent)]
    DataDir(#[from] StateDirError),
    /// The group's configuration was refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The log (its group) did not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The store did not open.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A sharded store's member did not start.
    #[error(transparent)]
    Shards(Box<crate::shard::host::HostError>),
}

/// A running member: its log, its store, and where it keeps them.
#[derive(Debug)]
pub struct Member {
    /// The log under the store.
    pub log: Arc<TailwindLog>,
    /// The store.
    pub store: Arc<Store<TailwindLog>>,
    dir: PathBuf,
    slot: bool,
}

/// A random node id below 1024 (from the clock and the process id: enough to make
/// two new members unlikely to pick the same; the group refuses a taken one).
fn random_id(attempt: usize) -> u32 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let x = u64::from(nanos) ^ (u64::from(std::process::id()) << 20) ^ (attempt as u64).wrapping_mul(0x9e37_79b9);
    (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 54) as u32
}

/// The group settings of a member of `cfg`'s store with id `id`, keeping its
/// state in `dir`.
fn group_builder(cfg: &MemberConfig, dir: &Path, ip: Ipv4Addr, id: u32) -> spindle_views::config::ConfigBuilder {
    let mut b = Config::builder(id, SocketAddr::from((ip, cfg.port)))
        .name(&cfg.name)
        .transport(cfg.transport)
        .state_dir(dir)
        .timeouts(Duration::from_millis(100).min(cfg.failure_timeout / 4), cfg.failure_timeout);
    if let Some(s) = &cfg.secret_file {
        b = b.secret_file(s);
    }
    if let Some(c) = cfg.contact {
        b = b.contact(c);
    }
    b
}

/// The data directory of a member of `cfg`'s store (claimed, if a slot), whether
/// it is a slot, the id kept in it, and the address to use.
fn place(cfg: &MemberConfig, kind: &str) -> Result<(PathBuf, bool, Option<u32>, Ipv4Addr), MemberError> {
    let (dir, slot) = match &cfg.data_dir {
        Some(d) => (d.clone(), false),
        None => (restart::claim_slot(&restart::default_state_base(kind, &cfg.name))?, true),
    };
    let kept = restart::saved_node(&dir, &cfg.name)?;
    let ip = cfg.ip.or_else(spindle_views::config::reachable_ipv4).unwrap_or(Ipv4Addr::LOCALHOST);
    Ok((dir, slot, kept, ip))
}

impl Member {
    /// Starts a member; `refused(id, why)` hears of each random id the group
    /// refused before another is tried.
    pub fn start(cfg: &MemberConfig, mut refused: impl FnMut(u32, &str)) -> Result<Member, MemberError> {
        let (dir, slot, kept, ip) = place(cfg, "kv")?;
        let handler = Handler::new();
        let mut attempt = 0;
        let log = loop {
            let (id, chosen) = match cfg.id.or(kept) {
                Some(id) => (id, true),
                None => (random_id(attempt), false),
            };
            let b = group_builder(cfg, &dir, ip, id);
            let mut tw = TailwindConfig::new(dir.join("log"));
            tw.buffer = 1 << 20;
            tw.replicas = cfg.replicas;
            tw.ack = cfg.ack;
            let h = handler.clone();
            match TailwindLog::start_with(b.build()?, tw, |b| b.client_handler(h)) {
                Ok(log) => break Arc::new(log),
                Err(StartError::Group(spindle_views::group::StartError::Join(why)))
                    if !chosen && attempt + 1 < ID_TRIES =>
                {
                    refused(id, &why);
                    attempt += 1;
                }
                Err(e) => return Err(e.into()),
            }
        };
        let store = Arc::new(Store::open(&dir.join("store"), log.clone())?);
        handler.serve(&store);
        Ok(Member { log, store, dir, slot })
    }

    /// This member's node id.
    pub fn id(&self) -> u32 {
        self.log.node().0
    }

    /// Where it keeps its id, log and store.
    pub fn data_dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Closes the store, leaves the group (waiting up to `within`) and gives its
    /// data slot back; false if it could not leave in time.
    pub fn leave(self, within: Duration) -> bool {
        let Member { log, store, dir, slot } = self;
        drop(store);
        let left = log.leave(within);
        if slot {
            restart::release_slot(&dir);
        }
        left
    }
}

/// A running member of a sharded store ([`crate::shard::host`]), started as
/// [`Member`] is (discovery, a data slot, a kept or random id); its data
/// directory is its slot under `kv-shards/<name>`.
#[derive(Debug)]
pub struct ShardMember {
    /// The member.
    pub host: crate::shard::host::ShardHost,
    dir: PathBuf,
    slot: bool,
}

impl ShardMember {
    /// Starts a member of `cfg`'s store with `shards` shards (every member of a
    /// store must say the same); `refused` as for [`Member::start`].
    pub fn start(
        cfg: &MemberConfig,
        shards: u16,
        mut refused: impl FnMut(u32, &str),
    ) -> Result<ShardMember, MemberError> {
        use crate::shard::host::{HostConfig, HostError, ShardHost};
        let (dir, slot, kept, ip) = place(cfg, "kv-shards")?;
        let mut attempt = 0;
        let host = loop {
            let (id, chosen) = match cfg.id.or(kept) {
                Some(id) => (id, true),
                None => (random_id(attempt), false),
            };
            let host_cfg =
                HostConfig { replicas: cfg.replicas, ack: cfg.ack, ..HostConfig::new(dir.join("shards"), shards) };
            match ShardHost::start(group_builder(cfg, &dir, ip, id).build()?, host_cfg) {
                Ok(h) => break h,
                Err(HostError::Group(spindle_views::group::StartError::Join(why)))
                    if !chosen && attempt + 1 < ID_TRIES =>
                {
                    refused(id, &why);
                    attempt += 1;
                }
                Err(e) => return Err(MemberError::Shards(Box::new(e))),
            }
        };
        Ok(ShardMember { host, dir, slot })
    }

    /// This member's node id.
    pub fn id(&self) -> u32 {
        self.host.node().0
    }

    /// Where it keeps its id, logs and stores.
    pub fn data_dir(&self) -> &Path {
        &self.dir
    }

    /// Leaves the group (waiting up to `within`) and gives its data slot back;
    /// false if it could not leave in time.
    pub fn leave(self, within: Duration) -> bool {
        let ShardMember { host, dir, slot } = self;
        let left = host.leave(within);
        if slot {
            restart::release_slot(&dir);
        }
        left
    }
}
