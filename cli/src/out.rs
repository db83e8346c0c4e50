//! What the command prints: text for people, or one JSON object per line
//! (`--json`), and errors with their exit codes.

use serde_json::Value;
use std::io::Write;

/// The exit codes (see the crate docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// The operation failed.
    Failed = 1,
    /// Bad usage (an argument clap could not check: a secret file, a value).
    Usage = 2,
    /// No member reached, or the credentials were refused.
    Unreachable = 3,
    /// No such topic or key.
    NotFound = 4,
}

/// An error for the user: one line, and the exit code.
#[derive(Debug)]
pub struct CliError {
    pub code: Code,
    pub msg: String,
}

impl CliError {
    pub fn failed(msg: impl Into<String>) -> CliError {
        CliError { code: Code::Failed, msg: msg.into() }
    }
    pub fn usage(msg: impl Into<String>) -> CliError {
        CliError { code: Code::Usage, msg: msg.into() }
    }
    pub fn unreachable(msg: impl Into<String>) -> CliError {
        CliError { code: Code::Unreachable, msg: msg.into() }
    }
    pub fn not_found(msg: impl Into<String>) -> CliError {
        CliError { code: Code::NotFound, msg: msg.into() }
    }
}

/// Where results go.
#[derive(Debug, Clone, Copy)]
pub struct Out {
    pub json: bool,
}

impl Out {
    pub fn new(json: bool) -> Out {
        Out { json }
    }

    /// One result: `text` for people, `json` with `--json`. A closed stdout (a
    /// pipe to `head`) ends the program quietly.
    pub fn emit(&self, text: impl FnOnce() -> String, json: impl FnOnce() -> Value) {
        let line = if self.json { json().to_string() } else { text() };
        let mut o = std::io::stdout().lock();
        if writeln!(o, "{line}").and_then(|_| o.flush()).is_err() {
            std::process::exit(0);
        }
    }

    /// A note for people on stderr (left out with `--json`).
    pub fn note(&self, text: &str) {
        if !self.json {
            eprintln!("{text}");
        }
    }

    /// The error, on stderr: a line of text, or `{"error": ..., "code": ...}`.
    pub fn error(&self, e: &CliError) {
        if self.json {
            eprintln!("{}", serde_json::json!({ "error": e.msg, "code": e.code as i32 }));
        } else {
            eprintln!("spindle: {}", e.msg);
        }
    }

    /// A progress bar of `len` steps on stderr, hidden with `--json` or when
    /// stderr is not a terminal.
    pub fn progress(&self, len: u64, what: &str) -> indicatif::ProgressBar {
        if self.json {
            return indicatif::ProgressBar::hidden();
        }
        let bar = indicatif::ProgressBar::new(len);
        let style = indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({per_sec}, {eta} left)")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        bar.set_message(what.to_string());
        bar
    }
}
