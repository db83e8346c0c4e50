//! Who may publish and subscribe which topics: rules for the named identities
//! clients prove (see `spindle_views::auth::Secret::identity` and docs/security.md), in
//! the spirit of Zenoh's access-control rules and DDS Security's permissions.
//!
//! A policy is a list of rules; each grants `publish`, `subscribe` or both on
//! `topics` (names, or `prefix*`, or `*`) to `identities` (names, or `*`):
//!
//! ```
//! use spindle_dds::{AccessPolicy, Action};
//! let p = AccessPolicy::from_toml(r#"
//!     [[rule]]
//!     identities = ["thermometer"]
//!     topics = ["temperature"]
//!     publish = true
//!
//!     [[rule]]
//!     identities = ["*"]
//!     topics = ["temperature", "status/*"]
//!     subscribe = true
//! "#).unwrap();
//! assert!(p.allows(Some("thermometer"), "temperature", Action::Publish));
//! assert!(!p.allows(Some("dashboard"), "temperature", Action::Publish));
//! assert!(p.allows(Some("dashboard"), "status/disk", Action::Subscribe));
//! assert!(p.allows(None, "anything", Action::Publish), "the group secret may do all");
//! ```
//!
//! What a rule does not grant is denied to named identities. A client that holds
//! the group secret itself (no identity), and every member, may do everything.
//! Without a policy ([`crate::DdsConfig::access`] `None`) every identity may do
//! everything. Each member enforces the policy it was given for its own clients:
//! give every member the same one. Topic and log names alike: a log read is a
//! subscription to the log's name.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// What a client asks to do with a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Write samples (a writer).
    Publish,
    /// Read samples (a reader, a history, a log read).
    Subscribe,
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Action::Publish => "publish",
            Action::Subscribe => "subscribe",
        })
    }
}

/// One grant (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Identity names, or `*` for every named identity.
    pub identities: Vec<String>,
    /// Topic (or log) names, `prefix*`, or `*`.
    pub topics: Vec<String>,
    /// Grants publishing.
    #[serde(default)]
    pub publish: bool,
    /// Grants subscribing.
    #[serde(default)]
    pub subscribe: bool,
}

/// A member's access policy for its clients' named identities.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessPolicy {
    /// The rules, in any order (a grant by any one is enough).
    #[serde(default, rename = "rule")]
    pub rules: Vec<Rule>,
}

/// Why a policy was refused.
#[derive(Debug, Error)]
pub enum PolicyError {
    /// The TOML does not parse as a policy.
    #[error("access policy: {0}")]
    Syntax(String),
    /// The file could not be read.
    #[error("access policy {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

impl AccessPolicy {
    /// Parses a policy (`[[rule]]` tables).
    pub fn from_toml(text: &str) -> Result<AccessPolicy, PolicyError> {
        toml::from_str(text).map_err(|e: toml::de::Error| PolicyError::Syntax(e.to_string().trim().to_string()))
    }

    /// Reads and parses a policy file.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<AccessPolicy, PolicyError> {
        let p = path.as_ref();
        let text =
            std::fs::read_to_string(p).map_err(|source| PolicyError::Read { path: p.display().to_string(), source })?;
        AccessPolicy::from_toml(&text)
    }

    /// Whether `identity` (`None`: the group secret) may do `action` on `topic`.
    pub fn allows(&self, identity: Option<&str>, topic: &str, action: Action) -> bool {
        let Some(who) = identity else { return true };
        self.rules.iter().any(|r| {
            let grants = match action {
                Action::Publish => r.publish,
                Action::Subscribe => r.subscribe,
            };
            grants && r.identities.iter().any(|i| i == "*" || i == who) && r.topics.iter().any(|t| matches(t, topic))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_by_identity_topic_and_action_and_nothing_else_is_granted() {
        let p = AccessPolicy::from_toml(
            "[[rule]]\nidentities = [\"a\"]\ntopics = [\"t*\"]\npublish = true\n\
             [[rule]]\nidentities = [\"*\"]\ntopics = [\"*\"]\nsubscribe = true\n",
        )
        .unwrap();
        assert!(p.allows(Some("a"), "t1", Action::Publish));
        assert!(!p.allows(Some("a"), "u", Action::Publish));
        assert!(!p.allows(Some("b"), "t1", Action::Publish));
        assert!(p.allows(Some("b"), "u", Action::Subscribe));
        assert!(!AccessPolicy::default().allows(Some("a"), "t", Action::Subscribe), "an empty policy grants nothing");
        assert!(AccessPolicy::default().allows(None, "t", Action::Publish));
        assert!(AccessPolicy::from_toml("[[rule]]\nwho = 1\n").is_err(), "unknown keys are refused");
    }
}
