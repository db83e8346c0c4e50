//! `kv`: run a member of the replicated key-value store, or use one from outside.

use crate::kv_shards::{self, remote_error};
use crate::out::{CliError, Out};
use crate::Target;
use clap::Subcommand;
use serde_json::json;
use spindle::kv::member::{Member, MemberConfig};
use spindle::kv::remote::{KvClient, RemoteError};
use spindle::tailwind::service::Ack;
use spindle::views::config::Transport;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Subcommand, Debug)]
pub enum KvCmd {
    /// Runs a member of the store until stdin closes or Ctrl-C: discovery finds the
    /// store (or this member starts it), the member keeps its id, log and store in
    /// a data slot of its own, and answers clients.
    Serve {
        /// The store's name (members of one store use the same).
        #[arg(long, default_value = "kv")]
        name: String,
        /// Data-plane transport.
        #[arg(long, default_value = "shm", value_parser = ["shm", "tcp"])]
        transport: String,
        /// Listen on and be reached at this address (left out: the default
        /// route's interface, or 127.0.0.1).
        #[arg(long)]
        ip: Option<Ipv4Addr>,
        /// Control port (the data port is the next); 0: the OS picks.
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// Join through this member instead of discovery.
        #[arg(long)]
        contact: Option<SocketAddr>,
        /// This member's node id (left out: kept in the data directory, or random).
        #[arg(long)]
        id: Option<u32>,
        /// Where this member keeps its id, log and store (left out: a slot under
        /// `$SPINDLE_DATA_DIR/kv/NAME` or `~/.local/share/spindle/kv/NAME`).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Copies of the log.
        #[arg(long, default_value_t = 3)]
        replicas: usize,
        /// When a put is acknowledged: `memory` (every copy holds it) or `disk`
        /// (also synced by a majority of the copies: survives a restart of all).
        #[arg(long, default_value = "memory", value_parser = ["memory", "disk"])]
        ack: String,
        /// The group's secret file. Left out: `SPINDLE_SECRET_FILE`, if set.
        #[arg(long)]
        secret_file: Option<PathBuf>,
        /// Run a member of a sharded store of this many shards (every member of
        /// the store gives the same), each a log of `--replicas` copies; left
        /// out: a store of one log.
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
        shards: Option<u16>,
    },
    /// Sets KEY to VALUE.
    Put {
        key: String,
        value: String,
        #[command(flatten)]
        target: Target,
    },
    /// Prints KEY's value (exit code 4 if there is none).
    Get {
        key: String,
        #[command(flatten)]
        target: Target,
    },
    /// Removes KEY.
    Del {
        key: String,
        #[command(flatten)]
        target: Target,
    },
    /// Prints the keys starting with PREFIX, with their values, in key order (of a
    /// sharded store: each shard's part read at its primary in turn).
    Scan {
        /// The prefix (empty: every key).
        #[arg(default_value = "")]
        prefix: String,
        /// At most this many.
        #[arg(long, default_value_t = 1000)]
        limit: u32,
        #[command(flatten)]
        target: Target,
    },
    /// What the member reached says of its store: the log's primary and members,
    /// how far its store applied the log, and its number of keys; of a sharded
    /// store: each shard's primary and share of the hashes, and the migrations.
    Status {
        #[command(flatten)]
        target: Target,
    },
    /// Moves a range of key hashes of a sharded store to shard TO: TO serves it
    /// at once and pulls its records; shows the pull until it ends.
    Migrate {
        /// FIRST-LAST (hex hashes, both included), or key:TEXT (that key's hash).
        range: String,
        /// The shard that takes it.
        to: u16,
        /// Return once the move is in the map, without waiting for the pull.
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        target: Target,
    },
}

fn client(target: &Target) -> Result<KvClient, CliError> {
    let creds = crate::credentials(target)?;
    let mut c = KvClient::connect(&target.connect, creds).map_err(|e| remote_error(e, &target.connect))?;
    c.set_timeout(Duration::from_secs(target.timeout.max(10)));
    Ok(c)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn run(out: &Out, cmd: KvCmd) -> Result<(), CliError> {
    match cmd {
        KvCmd::Serve { name, transport, ip, port, contact, id, data_dir, replicas, ack, secret_file, shards } => {
            let mut cfg = MemberConfig::new(&name);
            cfg.transport = if transport == "tcp" { Transport::Tcp } else { Transport::Shm };
            (cfg.ip, cfg.port, cfg.contact, cfg.id, cfg.data_dir) = (ip, port, contact, id, data_dir);
            (cfg.replicas, cfg.secret_file) = (replicas, secret_file);
            cfg.ack = if ack == "disk" { Ack::Disk } else { Ack::Memory };
            match shards {
                Some(n) => kv_shards::serve(out, &cfg, n),
                None => serve(out, &cfg),
            }
        }
        KvCmd::Put { key, value, target } => {
            let c = client(&target)?;
            match c.put(key.as_bytes(), value.as_bytes()) {
                // A member of a sharded store takes the other protocol.
                Err(RemoteError::Malformed) => {
                    let s = kv_shards::client(&target)?;
                    s.put(key.as_bytes(), value.as_bytes()).map_err(|e| remote_error(e, &target.connect))?;
                    out.emit(|| "ok".into(), || json!({ "key": key }));
                }
                r => {
                    let record = r.map_err(|e| remote_error(e, &target.connect))?;
                    out.emit(|| format!("ok (record {record})"), || json!({ "key": key, "record": record }));
                }
            }
            Ok(())
        }
        KvCmd::Del { key, target } => {
            let c = client(&target)?;
            match c.del(key.as_bytes()) {
                Err(RemoteError::Malformed) => {
                    let s = kv_shards::client(&target)?;
                    s.del(key.as_bytes()).map_err(|e| remote_error(e, &target.connect))?;
                    out.emit(|| "ok".into(), || json!({ "key": key }));
                }
                r => {
                    let record = r.map_err(|e| remote_error(e, &target.connect))?;
                    out.emit(|| format!("ok (record {record})"), || json!({ "key": key, "record": record }));
                }
            }
            Ok(())
        }
        KvCmd::Migrate { range, to, no_wait, target } => kv_shards::migrate(out, &range, to, no_wait, &target),
        KvCmd::Get { key, target } => {
            let c = client(&target)?;
            let got = match c.get(key.as_bytes()) {
                Err(RemoteError::Malformed) => {
                    kv_shards::client(&target)?.get(key.as_bytes()).map_err(|e| remote_error(e, &target.connect))
                }
                r => r.map_err(|e| remote_error(e, &target.connect)),
            };
            match got? {
                Some(v) => {
                    out.emit(|| text(&v), || json!({ "key": key, "value": text(&v) }));
                    Ok(())
                }
                None => Err(CliError::not_found(format!("no key `{key}`"))),
            }
        }
        KvCmd::Scan { prefix, limit, target } => {
            let c = client(&target)?;
            let pairs = match c.scan(prefix.as_bytes(), limit) {
                Err(RemoteError::Malformed) => kv_shards::client(&target)?
                    .scan(prefix.as_bytes(), limit)
                    .map_err(|e| remote_error(e, &target.connect))?,
                r => r.map_err(|e| remote_error(e, &target.connect))?,
            };
            for (k, v) in &pairs {
                out.emit(|| format!("{} = {}", text(k), text(v)), || json!({ "key": text(k), "value": text(v) }));
            }
            out.note(&format!("({} keys)", pairs.len()));
            Ok(())
        }
        KvCmd::Status { target } => {
            let c = client(&target)?;
            let s = match c.status() {
                Err(RemoteError::Malformed) => return kv_shards::status(out, &target),
                r => r.map_err(|e| remote_error(e, &target.connect))?,
            };
            out.emit(
                || {
                    let p = s.primary.map_or("none".into(), |p| format!("n{p}"));
                    format!(
                        "member n{}: log members {:?}, primary {p}, store applied up to record {}, ~{} keys",
                        s.node, s.log_members, s.applied, s.keys
                    )
                },
                || {
                    json!({"node": s.node, "primary": s.primary, "log_members": s.log_members,
                           "applied": s.applied, "keys": s.keys})
                },
            );
            Ok(())
        }
    }
}

fn serve(out: &Out, cfg: &MemberConfig) -> Result<(), CliError> {
    out.note(&format!("looking for store `{}`...", cfg.name));
    let m = Member::start(cfg, |id, why| out.note(&format!("id {id} refused ({why}); trying another")))
        .map_err(|e| CliError::failed(format!("the member did not start: {e}")))?;
    let addr = m.log.group().listen_addr();
    out.emit(
        || {
            format!(
                "member n{} of store `{}` serving at {addr} (data in {}); clients: spindle kv get KEY --connect {addr}",
                m.id(),
                cfg.name,
                m.data_dir().display()
            )
        },
        || json!({"node": m.id(), "store": cfg.name, "addr": addr.to_string(), "data_dir": m.data_dir()}),
    );
    let id = m.id();
    m.log.on_recovered(move |r| eprintln!("n{id} is now the primary: the log holds {} records", r.next.0));
    kv_shards::until_stdin_ends();
    let left = m.leave(Duration::from_secs(10));
    out.note(if left { "left the store's group" } else { "could not leave in time" });
    Ok(())
}
