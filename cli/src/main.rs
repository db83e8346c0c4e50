//! `spindle`: the project's command. Looks at a running group or DDS domain from
//! outside it (as a client of one of its members: it joins no view), runs and
//! uses the replicated key-value store, and benchmarks a local group.
//!
//! ```text
//! spindle ls     --connect 127.0.0.1:7100          # a domain's view, topics, endpoints, logs
//! spindle echo   TOPIC --connect 127.0.0.1:7100    # a topic's samples as they come
//! spindle pub    TOPIC --connect 127.0.0.1:7100    # JSON values from stdin, one per line
//! spindle status --connect 127.0.0.1:7100          # the view, members, each member's lag
//! spindle kv serve                                  # a member of the store (zero-config)
//! spindle kv put KEY VALUE --connect ADDR           # also get, del, scan, status
//! spindle keys ca DIR; spindle keys issue --ca-dir DIR NAME   # certificates (also: keys secret FILE)
//! spindle bench                                     # a local group's throughput
//! spindle completions bash > /etc/bash_completion.d/spindle
//! ```
//!
//! Every command takes `--json` (one JSON object per line on stdout). Exit codes:
//! 0 done, 1 the operation failed, 2 bad usage, 3 no member reached (or the
//! credentials were refused), 4 not found (no such topic or key).
#![forbid(unsafe_code)]

mod bench;
mod domain;
mod keys;
mod kv;
mod kv_shards;
mod out;
mod status;

use clap::{CommandFactory, Parser, Subcommand};
use out::{CliError, Out};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(name = "spindle", version, about = "Look at, use and benchmark spindle groups, domains and stores")]
struct Cli {
    /// Print one JSON object per line instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

/// How to reach a running group: its members' control addresses, and its secret.
#[derive(clap::Args, Debug, Clone)]
pub struct Target {
    /// Control addresses of members (comma separated; the first that answers
    /// serves, the next if it dies).
    #[arg(long, value_delimiter = ',', required = true)]
    pub connect: Vec<SocketAddr>,
    /// The group's secret file (see docs/security.md). Left out:
    /// `SPINDLE_SECRET_FILE`, if set.
    #[arg(long, conflicts_with = "tls_cert")]
    pub secret_file: Option<PathBuf>,
    /// This client's certificate (PEM), for a group of certificates: with `--ca`,
    /// `--key` and `--identity` (see docs/security.md).
    #[arg(long = "cert", id = "tls_cert", requires_all = ["tls_ca", "tls_key", "tls_identity"])]
    pub cert: Option<PathBuf>,
    /// The group's CA certificate (PEM).
    #[arg(long = "ca", id = "tls_ca", requires = "tls_cert")]
    pub ca: Option<PathBuf>,
    /// The private key of `--cert` (PEM).
    #[arg(long = "key", id = "tls_key", requires = "tls_cert")]
    pub key: Option<PathBuf>,
    /// The identity `--cert` names.
    #[arg(long = "identity", id = "tls_identity", requires = "tls_cert")]
    pub identity: Option<String>,
    /// The group's certificate revocation lists (PEM): a member whose certificate
    /// they revoke is not trusted. Left out: `SPINDLE_CRL_FILE`, if set.
    #[arg(long = "crl", id = "tls_crl", requires = "tls_cert")]
    pub crl: Option<PathBuf>,
    /// Seconds to wait for a member.
    #[arg(long, default_value_t = 5)]
    pub timeout: u64,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// A DDS domain's view, members, topics (type, QoS, writers, readers) and logs.
    Ls {
        #[command(flatten)]
        target: Target,
    },
    /// Prints a topic's samples as they come (its history first, for Volatile and
    /// Logged topics).
    Echo {
        /// The topic.
        topic: String,
        #[command(flatten)]
        target: Target,
        /// Stop after this many samples.
        #[arg(long)]
        count: Option<u64>,
        /// Stop after this many seconds.
        #[arg(long)]
        seconds: Option<f64>,
    },
    /// Writes to a topic the JSON values read from stdin, one per line (topics of
    /// strings, numbers or booleans; `--hex` sends each line's hex bytes as they
    /// are, for a topic of any type).
    Pub {
        /// The topic (it must exist in the domain).
        topic: String,
        #[command(flatten)]
        target: Target,
        /// Lines are hex bytes of the encoded sample, not JSON.
        #[arg(long)]
        hex: bool,
    },
    /// A group's view and members, and each member's progress and lag, as the
    /// member reached sees them.
    Status {
        #[command(flatten)]
        target: Target,
    },
    /// The replicated key-value store: run a member, or use one.
    Kv {
        #[command(subcommand)]
        cmd: kv::KvCmd,
    },
    /// Makes credentials: a group secret, an identity's key, a CA, a certificate.
    Keys {
        #[command(subcommand)]
        cmd: keys::KeysCmd,
    },
    /// A local group's throughput: N member processes on this host, every one
    /// sending messages in total order; checks that all delivered the same sequence.
    Bench(bench::BenchArgs),
    /// Prints a completion script for a shell (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

fn main() {
    let cli = Cli::parse();
    let out = Out::new(cli.json);
    let result = match cli.cmd {
        Cmd::Ls { target } => domain::ls(&out, &target),
        Cmd::Echo { topic, target, count, seconds } => domain::echo(&out, &target, &topic, count, seconds),
        Cmd::Pub { topic, target, hex } => domain::publish(&out, &target, &topic, hex),
        Cmd::Status { target } => status::run(&out, &target),
        Cmd::Kv { cmd } => kv::run(&out, cmd),
        Cmd::Keys { cmd } => keys::run(&out, cmd),
        Cmd::Bench(args) => bench::run(&out, &args),
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "spindle", &mut std::io::stdout());
            Ok(())
        }
    };
    if let Err(e) = result {
        out.error(&e);
        std::process::exit(e.code as i32);
    }
}

/// The certificates of `--cert`, or the secret of [`secret`].
pub fn credentials(target: &Target) -> Result<Option<spindle::views::auth::Credentials>, CliError> {
    let (Some(cert), Some(ca), Some(key), Some(name)) = (&target.cert, &target.ca, &target.key, &target.identity)
    else {
        return Ok(secret(target)?.map(Into::into));
    };
    let mut certs = spindle::views::auth::Certificates::load(ca, cert, key, name)
        .map_err(|e| CliError::usage(format!("certificates: {e}")))?;
    let env = std::env::var_os(spindle::views::config::CRL_ENV).filter(|v| !v.is_empty());
    if let Some(crl) = target.crl.clone().or_else(|| env.map(PathBuf::from)) {
        certs = certs.revocation_list(&crl).map_err(|e| CliError::usage(format!("revocation list: {e}")))?;
    }
    Ok(Some(certs.into()))
}

/// The secret named by `--secret-file`, or `SPINDLE_SECRET_FILE`'s, or none.
pub fn secret(target: &Target) -> Result<Option<spindle::views::auth::Secret>, CliError> {
    let path = target.secret_file.clone().or_else(|| std::env::var_os("SPINDLE_SECRET_FILE").map(PathBuf::from));
    match path {
        Some(p) => spindle::views::auth::Secret::load(&p)
            .map(Some)
            .map_err(|e| CliError::usage(format!("secret file {}: {e}", p.display()))),
        None => Ok(None),
    }
}
