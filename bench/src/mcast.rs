//! What the multicast benchmarks (`bandwidth`, `latency`) share: their common
//! arguments, the subgroups they build, and running one node function per node, as
//! threads (`mem`) or as child processes of the program (`shm`, `tcp` on 127.0.0.1).

use clap::{Args, ValueEnum};
use serde_json::Value;
use spindle_smc::runtime::{Runtime, SubgroupSetup};
use spindle_smc::{Mode, SmcLayout, SubgroupSpec};
use spindle_sst::predicate::PollConfig;
use spindle_sst::sync::Arc;
use spindle_sst::transport::{NodeId, RegionId, RegionSpec, Transport};
use std::time::Duration;
use testkit::TransportKind;

/// Which members send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Senders {
    /// Every member.
    All,
    /// The first half (at least one).
    Half,
    /// Member 0 only.
    One,
}

impl Senders {
    /// How many of `nodes` members send (the first ones).
    pub fn count(self, nodes: usize) -> usize {
        match self {
            Senders::All => nodes,
            Senders::Half => (nodes / 2).max(1),
            Senders::One => 1,
        }
    }
}

/// Delivery mode on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// Atomic multicast.
    Ordered,
    /// Deliver on receipt.
    Unordered,
}

/// Arguments every multicast benchmark takes.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Transport: mem (threads), shm (processes, /dev/shm), tcp (processes, 127.0.0.1).
    #[arg(long, default_value = "shm")]
    pub transport: TransportKind,
    /// Members (every subgroup has them all).
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,
    /// Which members send.
    #[arg(long, value_enum, default_value = "one")]
    pub senders: Senders,
    /// Payload bytes per message (up to 1 GiB; past `--slot` it goes through the
    /// sender's arena).
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Largest message in a ring slot (the subgroup's max_msg); default: `--size` up
    /// to 16 KiB, else 1024 (larger messages take the arena path).
    #[arg(long)]
    pub slot: Option<usize>,
    /// Bytes of each sender's arena; default, when `--size` exceeds the slot: four
    /// messages and at least 64 MiB (at most 1 GiB).
    #[arg(long)]
    pub arena: Option<usize>,
    /// Pack small messages: those committed while the sender's predicate thread
    /// is busy join its last entry (several to a slot, one index). Without
    /// `--slot`, slots are then at least 1 KiB.
    #[arg(long)]
    pub pack: bool,
    /// Relay large messages member to member (the RDMC chain; over tcp the sender
    /// sends each payload once instead of once per member).
    #[arg(long)]
    pub relay: bool,
    /// Messages per sender per subgroup.
    #[arg(long, default_value_t = 100_000)]
    pub count: u64,
    /// Slots per sender ring; without it the ring is sized in bytes
    /// (`spindle_smc::spec::auto_window`: 2 MiB of slots, 256 to 16,384 of them).
    #[arg(long)]
    pub window: Option<usize>,
    /// Delivery mode.
    #[arg(long, value_enum, default_value = "ordered")]
    pub mode: ModeArg,
    /// Subgroups over the same nodes, each with its own table and sender threads.
    #[arg(long, default_value_t = 1)]
    pub subgroups: usize,
    /// The predicate thread's settings.
    #[command(flatten)]
    pub polling: crate::Polling,
    /// tcp only, needs root: run every node in a network namespace of its own on a
    /// bridge, its link shaped to this many Mbit/s each way: separate hosts with
    /// links of that speed, emulated on one machine.
    #[arg(long)]
    pub link_mbit: Option<u64>,
    /// Print one JSON line instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// A group secret file (tcp only): every link proves it at setup and seals its
    /// frames with AES-256-GCM, as a Group with a secret does.
    #[arg(long)]
    pub secret_file: Option<std::path::PathBuf>,
    /// The hidden arguments of a node process (it takes its role from testkit's
    /// environment; these are accepted and unused).
    #[command(flatten)]
    pub member: crate::MemberArgs,
}

impl Common {
    /// Checks ranges a user can get wrong; the message says which flag.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=64).contains(&self.nodes) {
            return Err("--nodes must be in 1..=64".into());
        }
        if self.size == 0 || self.size > spindle_smc::spec::MAX_ARENA {
            return Err(format!("--size must be in 1..={}", spindle_smc::spec::MAX_ARENA));
        }
        if self.slot.is_some_and(|s| s == 0 || s > spindle_smc::spec::MAX_MSG) {
            return Err(format!("--slot must be in 1..={}", spindle_smc::spec::MAX_MSG));
        }
        if self.size > self.slot_bytes() && !(self.size..=spindle_smc::spec::MAX_ARENA).contains(&self.arena_bytes()) {
            return Err(format!("--arena must hold a message: {}..={}", self.size, spindle_smc::spec::MAX_ARENA));
        }
        if self.window.is_some_and(|w| w == 0 || w > spindle_smc::spec::MAX_WINDOW) {
            return Err(format!("--window must be in 1..={}", spindle_smc::spec::MAX_WINDOW));
        }
        if self.subgroups == 0 || self.subgroups > 16 {
            return Err("--subgroups must be in 1..=16".into());
        }
        if self.count == 0 {
            return Err("--count must be positive".into());
        }
        if let Some(p) = &self.secret_file {
            if self.transport != TransportKind::Tcp {
                return Err("--secret-file: only tcp links are sealed (shm and mem stay in one host's memory)".into());
            }
            spindle_views::auth::Secret::load(p).map_err(|e| format!("--secret-file: {e}"))?;
        }
        if let Some(m) = self.link_mbit {
            if self.transport != TransportKind::Tcp {
                return Err("--link-mbit: only tcp nodes run as hosts of their own".into());
            }
            if !(1..=100_000).contains(&m) {
                return Err("--link-mbit must be in 1..=100000".into());
            }
            // Asked once, by the parent (its node processes run in the namespaces).
            let probe = format!("bwp{}", std::process::id() % 100_000);
            if let Some(why) = (!testkit::is_child()).then(|| testkit::netns::unshapable(&probe)).flatten() {
                return Err(format!("--link-mbit: {why}"));
            }
        }
        if self.transport == TransportKind::Rdma {
            // Refuse before any process starts, with the reason.
            spindle_sst::transport::rdma::available().map_err(|why| format!("--transport rdma: {why}"))?;
        }
        let table = SmcLayout::new(&self.specs()[0]).table_bytes();
        if table > 8 << 30 {
            return Err(format!("a table of {table} bytes is too large: lower --window or --size"));
        }
        Ok(())
    }

    /// Slots per ring: `--window`, or the byte-sized default for the slot size.
    pub fn window(&self) -> usize {
        self.window.unwrap_or_else(|| spindle_smc::spec::auto_window(self.slot_bytes()))
    }

    /// The largest message in a slot (`--slot` or its default).
    pub fn slot_bytes(&self) -> usize {
        let fits = if self.pack { (self.size + 8).max(1024) } else { self.size };
        self.slot.unwrap_or(if self.size <= 16 << 10 { fits } else { 1024 })
    }

    /// Each sender's arena (`--arena` or its default; 0 when messages fit a slot).
    pub fn arena_bytes(&self) -> usize {
        match self.arena {
            Some(a) => a,
            None if self.size > self.slot_bytes() => (4 * self.size).clamp(64 << 20, spindle_smc::spec::MAX_ARENA),
            None => 0,
        }
    }

    /// The sending members.
    pub fn sender_ids(&self) -> Vec<NodeId> {
        (0..self.senders.count(self.nodes) as u32).map(NodeId).collect()
    }

    /// The subgroups (all over every node).
    pub fn specs(&self) -> Vec<SubgroupSpec> {
        let members: Vec<NodeId> = (0..self.nodes as u32).map(NodeId).collect();
        let mode = match self.mode {
            ModeArg::Ordered => Mode::Ordered,
            ModeArg::Unordered => Mode::Unordered,
        };
        (0..self.subgroups)
            .map(|_| SubgroupSpec {
                members: members.clone(),
                senders: self.sender_ids(),
                window: self.window(),
                max_msg: self.slot_bytes(),
                arena: self.arena_bytes(),
                mode,
                relay: self.relay,
            })
            .collect()
    }

    /// One region per subgroup table.
    pub fn regions(&self) -> Vec<RegionSpec> {
        self.specs()
            .iter()
            .enumerate()
            .map(|(i, s)| RegionSpec { id: RegionId(i as u16), len: SmcLayout::new(s).table_bytes() })
            .collect()
    }

    /// The spin budget in µs: the one given, or the host's choice for this many
    /// nodes on it.
    pub fn spin(&self) -> u64 {
        self.polling
            .spin_us
            .unwrap_or_else(|| spindle_sst::spin::auto_spin_us(self.nodes, spindle_sst::spin::host_cores()))
    }

    /// The predicate thread's configuration.
    pub fn poll(&self, me: NodeId) -> PollConfig {
        PollConfig {
            spin: Duration::from_micros(self.spin()),
            name: format!("smc-pred-{}", me.0),
            busy_yield: self.polling.busy_yield(),
            ..PollConfig::default()
        }
    }

    /// Starts this node's runtime with one upcall per subgroup.
    pub fn start(&self, t: Arc<dyn Transport>, upcalls: Vec<spindle_smc::runtime::Upcall>) -> Result<Runtime, String> {
        let me = t.local_id();
        let setups = self
            .specs()
            .into_iter()
            .zip(upcalls)
            .enumerate()
            .map(|(i, (spec, upcall))| SubgroupSetup {
                spec,
                region: RegionId(i as u16),
                upcall,
                delivery: Default::default(),
            })
            .collect();
        Runtime::start(t, setups, self.poll(me)).map_err(|e| e.to_string())
    }
}

/// Runs `node` on every node and returns each node's JSON result, by node id: as
/// threads for `mem`, else as child processes of this program (which must call
/// [`child_main`] first thing in `main`).
pub fn run_nodes<F>(c: &Common, node: F) -> Result<Vec<Value>, String>
where
    F: Fn(Arc<dyn Transport>) -> Result<Value, String> + Sync,
{
    let regions = c.regions();
    match c.transport {
        TransportKind::Mem => {
            let g = testkit::local_group(TransportKind::Mem, c.nodes, &regions, Duration::from_secs(30))
                .map_err(|e| e.to_string())?;
            std::thread::scope(|s| {
                let hs: Vec<_> = g.nodes.iter().map(|t| s.spawn(|| node(t.clone()))).collect();
                hs.into_iter().map(|h| h.join().map_err(|_| "a node thread panicked".to_string())?).collect()
            })
        }
        kind => {
            testkit::catch_interrupts();
            spindle_sst::transport::shm::remove_stale_files();
            // The emulated hosts outlive their members (dropped after them).
            let net = match c.link_mbit {
                Some(mbit) => {
                    let net = testkit::netns::Net::create(&format!("bw{}", std::process::id() % 100_000), c.nodes)?;
                    net.shape(mbit)?;
                    Some(net)
                }
                None => None,
            };
            let kids = crate::start_members_in(net.as_ref(), c.nodes, kind, Duration::from_secs(3600), &[], &[], &[])?;
            let (results, ok) = crate::collect_results(kids, c.nodes)?;
            if !ok {
                return Err("a node process failed".into());
            }
            Ok(results)
        }
    }
}

/// In a node process: builds the transport, runs `node`, prints its result for the
/// parent and waits to be released. Returns false if this is not a node process.
pub fn child_main<F>(c: &Common, node: F) -> bool
where
    F: FnOnce(Arc<dyn Transport>) -> Result<Value, String>,
{
    if !testkit::is_child() {
        return false;
    }
    testkit::die_with_parent();
    let auth = match &c.secret_file {
        Some(p) => match spindle_views::auth::Secret::load(p) {
            Ok(s) => Some(s.link_auth()),
            Err(e) => {
                crate::err(&format!("node: {e}"));
                std::process::exit(1);
            }
        },
        None => None,
    };
    let result = testkit::child_transport_with(&c.regions(), Duration::from_secs(60), auth)
        .map_err(|e| e.to_string())
        .and_then(|(_, _, t)| node(t));
    match result {
        Ok(v) => crate::out(&format!("RESULT {v}")),
        Err(e) => {
            crate::err(&format!("node: {e}"));
            std::process::exit(1);
        }
    }
    testkit::wait_for_parent();
    true
}

/// Running FNV-1a over words: the delivery digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digest(pub u64);

impl Default for Digest {
    fn default() -> Self {
        Digest(spindle_sst::hash::EMPTY)
    }
}

impl Digest {
    /// Folds bytes in.
    pub fn add_bytes(&mut self, bytes: &[u8]) {
        self.0 = spindle_sst::hash::continue_digest(self.0, bytes);
    }

    /// Folds one word in, as one FNV-1a step over the whole word (a byte at a time
    /// took eight dependent multiplies, about a hundred instructions per message in
    /// the throughput benchmarks' upcalls, which should cost little more than a count).
    #[inline]
    pub fn add(&mut self, w: u64) {
        self.0 = (self.0 ^ w).wrapping_mul(spindle_sst::hash::PRIME);
    }
}
