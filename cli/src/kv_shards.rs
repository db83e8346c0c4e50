//! `kv` on a sharded store: running a member (`kv serve --shards N`), the
//! client commands when the member reached is one of a sharded store, `kv
//! migrate`, and its status.

use crate::out::{CliError, Out};
use crate::Target;
use serde_json::json;
use spindle::kv::member::{MemberConfig, ShardMember};
use spindle::kv::remote::RemoteError;
use spindle::kv::shard::client::{MigrateError, ShardClient};
use spindle::kv::shard::wire::{HostStatus, NO_COPY};
use spindle::kv::shard::{key_hash, Range};
use spindle::views::client::ClientError;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long `kv migrate` waits for the migration to end.
const MIGRATE_WAIT: Duration = Duration::from_secs(600);

pub fn client(target: &Target) -> Result<ShardClient, CliError> {
    let creds = crate::credentials(target)?;
    ShardClient::connect(&target.connect, creds).map_err(|e| remote_error(e, &target.connect))
}

/// A client's error as the command reports it (no member reached: exit 3).
pub fn remote_error(e: RemoteError, to: &[SocketAddr]) -> CliError {
    match e {
        RemoteError::Client(ClientError::Connect(why)) => CliError::unreachable(format!("no member of {to:?}: {why}")),
        e => CliError::failed(e.to_string()),
    }
}

/// A range: `FIRST-LAST` (hex hashes) or `key:TEXT` (that key's hash alone).
pub fn parse_range(s: &str) -> Result<Range, CliError> {
    if let Some(key) = s.strip_prefix("key:") {
        return Ok(Range::one(key_hash(key.as_bytes())));
    }
    s.parse::<Range>().map_err(|e| CliError::usage(format!("range `{s}`: {e} (or key:TEXT)")))
}

pub fn status(out: &Out, target: &Target) -> Result<(), CliError> {
    let c = client(target)?;
    let s = c.status().map_err(|e| remote_error(e, &target.connect))?;
    print_status(out, &s);
    Ok(())
}

fn print_status(out: &Out, s: &HostStatus) {
    // In JSON, a shard this member holds no copy of has no key count (null).
    let keys: Vec<Option<u64>> = s.keys.iter().map(|k| (*k != NO_COPY).then_some(*k)).collect();
    out.emit(
        || {
            let mut t = format!("member n{} of a sharded store, map version {}:\n", s.node, s.version);
            for (i, share) in s.shares.iter().enumerate() {
                let p = s.primaries.get(i).copied().flatten().map_or("none".into(), |p| format!("n{p}"));
                let here = match s.keys.get(i).copied() {
                    Some(NO_COPY) | None => "no copy here".to_string(),
                    Some(k) => format!("~{k} keys here"),
                };
                t += &format!("  shard {i}: primary {p}, {:.1}% of the hashes, {here}\n", *share as f64 / 1e4);
            }
            for (id, first, last, from, to) in &s.migrations {
                t += &format!("  migration {id}: {first:016x}-{last:016x} from shard {from} to shard {to}\n");
            }
            if s.migrations.is_empty() {
                t += "  no migration in progress";
            }
            t.trim_end().to_string()
        },
        || {
            json!({"node": s.node, "version": s.version, "primaries": s.primaries, "shares_ppm": s.shares,
                   "keys": keys, "migrations": s.migrations, "pulled": s.pulled})
        },
    );
}

/// `kv migrate RANGE TO`: asks for the move, then (unless `no_wait`) shows the
/// new owner's pull until the map lists no migration.
pub fn migrate(out: &Out, range: &str, to: u16, no_wait: bool, target: &Target) -> Result<(), CliError> {
    let range = parse_range(range)?;
    let c = client(target)?;
    let version = c.migrate(range, to).map_err(|e| match e {
        MigrateError::Refused(why) => CliError::usage(format!("the map refused the move: {why}")),
        MigrateError::Remote(e) => remote_error(e, &target.connect),
    })?;
    out.note(&format!("map version {version}: shard {to} owns {range} now and pulls its records"));
    if no_wait {
        out.emit(|| format!("migrating (map version {version})"), || json!({"version": version, "done": false}));
        return Ok(());
    }
    let bar = out.progress(0, "records pulled");
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg}: {pos} ({per_sec})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    let began = Instant::now();
    // Progress: what the new owner's primary says it pulled.
    let primary_of_to =
        || c.route().and_then(|r| r.primaries.get(usize::from(to)).copied().flatten()).map(|(_, a)| vec![a]);
    let start = primary_of_to().and_then(|a| c.status_of(&a).ok()).map_or(0, |s| s.pulled.0);
    loop {
        let s = c.status().map_err(|e| remote_error(e, &target.connect))?;
        if let Some(p) = primary_of_to().and_then(|a| c.status_of(&a).ok()) {
            bar.set_position(p.pulled.0.saturating_sub(start));
        }
        if s.moves_ended(version) {
            bar.finish_and_clear();
            let secs = began.elapsed().as_secs_f64();
            out.emit(
                || format!("migration done in {secs:.1} s (map version {})", s.version),
                || json!({"version": s.version, "done": true, "seconds": secs}),
            );
            return Ok(());
        }
        if began.elapsed() > MIGRATE_WAIT {
            bar.abandon();
            return Err(CliError::failed(format!("the migration had not ended after {MIGRATE_WAIT:?}")));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Runs a member of a sharded store until stdin closes.
pub fn serve(out: &Out, cfg: &MemberConfig, shards: u16) -> Result<(), CliError> {
    out.note(&format!("looking for sharded store `{}` ({shards} shards)...", cfg.name));
    let m = ShardMember::start(cfg, shards, |id, why| out.note(&format!("id {id} refused ({why}); trying another")))
        .map_err(|e| CliError::failed(format!("the member did not start: {e}")))?;
    let addr = m.host.group().listen_addr();
    out.emit(
        || {
            format!(
                "member n{} of sharded store `{}` ({shards} shards) serving at {addr} (data in {}); clients: spindle kv get KEY --connect {addr}",
                m.id(),
                cfg.name,
                m.data_dir().display()
            )
        },
        || json!({"node": m.id(), "store": cfg.name, "shards": shards, "addr": addr.to_string(), "data_dir": m.data_dir()}),
    );
    until_stdin_ends();
    let left = m.leave(Duration::from_secs(10));
    out.note(if left { "left the store's group" } else { "could not leave in time" });
    Ok(())
}

/// Returns once stdin closes (Ctrl-D, or the end of a pipe): how a member run
/// by the command knows to leave. Ctrl-C ends the process instead, which the
/// others see as a failure and handle.
pub fn until_stdin_ends() {
    let mut sink = String::new();
    while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {
        sink.clear();
    }
}
