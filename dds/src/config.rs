//! A participant's configuration: the group's TOML (`spindle_views::config`) plus a `[dds]`
//! section. Unknown keys are errors that name the key.
//!
//! ```
//! use spindle_dds::DdsConfig;
//! let cfg = DdsConfig::from_toml(r#"
//!     node_id = 1
//!     listen = "127.0.0.1:7101"
//!     name = "sensors"
//!     [dds]
//!     log_dir = "/tmp/sensors-logs"
//!     fsync = "every:64"
//! "#).unwrap();
//! assert_eq!(cfg.group.node_id, 1);
//! assert_eq!(cfg.fsync, spindle_dds::log::Fsync::Every(64));
//! assert!(DdsConfig::from_toml("node_id = 1\nlisten = \"127.0.0.1:1\"\n[dds]\nlog_dri = \"x\"").is_err());
//! ```

use crate::log::Fsync;
use serde::Deserialize;
use spindle_views::config::{Config, ConfigError};
use std::path::PathBuf;
use std::time::Duration;

/// A participant's configuration.
#[derive(Debug, Clone)]
pub struct DdsConfig {
    /// The domain's group (its `name` is the domain).
    pub group: Config,
    /// Where Logged topics and replicated logs keep their files (default:
    /// [`default_data_dir`], which survives reboots; never the temporary
    /// directory). One file per topic and node.
    pub log_dir: PathBuf,
    /// When a Logged topic's appends reach the disk (default: every 64 samples).
    pub fsync: Fsync,
    /// How long creating a topic, writer or reader waits for the view that holds it
    /// (default 30 s).
    pub setup_timeout: Duration,
    /// How long a late joiner tries to fetch a topic's history (default 30 s).
    pub catch_up_timeout: Duration,
    /// How many clients this member serves and how much it buffers for each
    /// (`[dds] max_clients`, `client_buffer_bytes`; see [`crate::client`]).
    pub client_limits: spindle_views::group::ClientLimits,
    /// What named client identities may publish and subscribe (`[dds]
    /// access_file`; see [`crate::access`]). `None`: everything.
    pub access: Option<crate::access::AccessPolicy>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Section {
    log_dir: Option<PathBuf>,
    fsync: Option<String>,
    setup_timeout_ms: Option<u64>,
    catch_up_timeout_ms: Option<u64>,
    max_clients: Option<usize>,
    client_buffer_bytes: Option<usize>,
    access_file: Option<PathBuf>,
}

/// Where durable files go unless configured: `$SPINDLE_DATA_DIR` if set, else
/// `$XDG_DATA_HOME/spindle/dds`, else `$HOME/.local/share/spindle/dds`, else
/// `spindle-data/dds` under the working directory. Never the temporary directory,
/// which a reboot may empty.
pub fn default_data_dir() -> PathBuf {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(d) = var("SPINDLE_DATA_DIR") {
        return d;
    }
    if let Some(d) = var("XDG_DATA_HOME") {
        return d.join("spindle").join("dds");
    }
    if let Some(h) = var("HOME") {
        return h.join(".local").join("share").join("spindle").join("dds");
    }
    PathBuf::from("spindle-data").join("dds")
}

impl DdsConfig {
    /// The defaults over a group configuration.
    pub fn new(group: Config) -> DdsConfig {
        DdsConfig {
            group,
            log_dir: default_data_dir(),
            fsync: Fsync::Every(64),
            setup_timeout: Duration::from_secs(30),
            catch_up_timeout: Duration::from_secs(30),
            client_limits: spindle_views::group::ClientLimits::default(),
            access: None,
        }
    }

    /// Parses a TOML document: the group's keys, and the `[dds]` section.
    pub fn from_toml(text: &str) -> Result<DdsConfig, ConfigError> {
        let syntax = |e: String| ConfigError::Syntax(e.trim().to_string());
        let mut doc: toml::Table = toml::from_str(text).map_err(|e: toml::de::Error| syntax(e.to_string()))?;
        let section: Section = match doc.remove("dds") {
            Some(v) => v.try_into().map_err(|e: toml::de::Error| syntax(format!("[dds]: {e}")))?,
            None => Section::default(),
        };
        let group = Config::from_toml(&toml::to_string(&doc).map_err(|e| syntax(e.to_string()))?)?;
        let mut cfg = DdsConfig::new(group);
        if let Some(d) = section.log_dir {
            cfg.log_dir = d;
        }
        if let Some(f) = section.fsync {
            cfg.fsync = parse_fsync(&f).map_err(|why| ConfigError::Invalid { key: "dds.fsync", why })?;
        }
        if let Some(f) = section.access_file {
            let p = crate::access::AccessPolicy::from_file(&f)
                .map_err(|e| ConfigError::Invalid { key: "dds.access_file", why: e.to_string() })?;
            cfg.access = Some(p);
        }
        if let Some(ms) = section.setup_timeout_ms {
            cfg.setup_timeout = Duration::from_millis(ms);
        }
        if let Some(ms) = section.catch_up_timeout_ms {
            cfg.catch_up_timeout = Duration::from_millis(ms);
        }
        if let Some(n) = section.max_clients {
            cfg.client_limits.max_clients = n;
        }
        if let Some(b) = section.client_buffer_bytes {
            cfg.client_limits.buffer_bytes = b;
        }
        Ok(cfg)
    }

    /// Reads and parses a TOML file.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<DdsConfig, ConfigError> {
        let p = path.as_ref();
        let text = std::fs::read_to_string(p)
            .map_err(|e| ConfigError::File { path: p.display().to_string(), why: e.to_string() })?;
        DdsConfig::from_toml(&text)
    }
}

/// `always`, `never` or `every:N`.
pub fn parse_fsync(s: &str) -> Result<Fsync, String> {
    match s {
        "always" => Ok(Fsync::Always),
        "never" => Ok(Fsync::Never),
        _ => match s.strip_prefix("every:").map(str::parse::<u32>) {
            Some(Ok(n)) if n > 0 => Ok(Fsync::Every(n)),
            _ => Err(format!("is `{s}`; expected always, never or every:N (N > 0)")),
        },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn durable_files_never_default_to_the_temporary_directory() {
        let d = super::default_data_dir();
        assert!(!d.starts_with(std::env::temp_dir()), "{}", d.display());
        assert!(d.ends_with("dds") || std::env::var_os("SPINDLE_DATA_DIR").is_some(), "{}", d.display());
    }
}
