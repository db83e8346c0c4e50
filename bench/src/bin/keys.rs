//! keys: makes a group's secret, and the keys of named client identities derived
//! from it (see docs/security.md).
//!
//! ```text
//! keys new group.key                                    # 32 random bytes, mode 0600
//! keys identity --secret-file group.key thermometer thermometer.key
//! ```
//!
//! Give members (and clients with every right) the group secret; give a client
//! that should only do what the access policy grants its name the identity's key
//! and name (`ClientConfig { secret_file, identity }`, or `[security] identity`).
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use spindle_views::auth::Secret;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(about = "Make a group secret, or an identity's key derived from one")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// A new group secret in FILE (which must not exist).
    New {
        /// Where to write it.
        file: PathBuf,
    },
    /// The key of identity NAME, derived from the group secret, in FILE.
    Identity {
        /// The group's secret file.
        #[arg(long)]
        secret_file: PathBuf,
        /// The identity's name (letters, digits, '.', '_', '-').
        name: String,
        /// Where to write its key (must not exist).
        file: PathBuf,
    },
}

fn main() {
    let args = Args::parse();
    let done = match args.cmd {
        Cmd::New { file } => Secret::generate(&file).map(|_| file).map_err(|e| e.to_string()),
        Cmd::Identity { secret_file, name, file } => Secret::load(&secret_file)
            .map_err(|e| e.to_string())
            .and_then(|s| s.identity(&name).map_err(|e| e.to_string()))
            .and_then(|k| k.save(&file).map(|_| file).map_err(|e| e.to_string())),
    };
    match done {
        Ok(f) => println!("wrote {}", f.display()),
        Err(e) => {
            eprintln!("keys: {e}");
            std::process::exit(1);
        }
    }
}
