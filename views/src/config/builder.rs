//! [`ConfigBuilder`]: a [`Config`] built in code.

use super::*;

/// Builds a [`Config`] in code; [`ConfigBuilder::build`] checks it like a file.
#[derive(Debug, Clone)]
pub struct ConfigBuilder(pub(super) Config);

impl ConfigBuilder {
    /// The group's name.
    pub fn name(mut self, name: &str) -> Self {
        self.0.name = name.into();
        self
    }
    /// Join an existing group through this member.
    pub fn contact(mut self, addr: SocketAddr) -> Self {
        self.0.contact = Some(addr);
        self
    }
    /// Data-plane transport.
    pub fn transport(mut self, t: Transport) -> Self {
        self.0.transport = t;
        self
    }
    /// Slots per sender ring (without it the ring is sized in bytes; see
    /// [`Config::window`]).
    pub fn window(mut self, w: usize) -> Self {
        self.0.window = Some(w);
        self
    }
    /// Largest message in a ring slot.
    pub fn max_msg(mut self, m: usize) -> Self {
        self.0.max_msg = m;
        self
    }
    /// Bytes of each sender's arena (messages larger than `max_msg`; 0: none).
    pub fn arena(mut self, bytes: usize) -> Self {
        self.0.arena = bytes;
        self
    }
    /// Relays large messages member to member over tcp (see [`Config::relay`]).
    pub fn relay(mut self, on: bool) -> Self {
        self.0.relay = on;
        self
    }
    /// Heartbeat period and failure timeout.
    pub fn timeouts(mut self, heartbeat: Duration, failure: Duration) -> Self {
        self.0.heartbeat_ms = heartbeat.as_millis() as u64;
        self.0.failure_timeout_ms = failure.as_millis() as u64;
        self
    }
    /// Predicate-thread spin budget (left out: chosen from the host, see
    /// [`Config::spin_us`]).
    pub fn spin(mut self, spin: Duration) -> Self {
        self.0.spin_us = Some(spin.as_micros() as u64);
        self
    }
    /// How long the predicate thread's passes do work without a break before it
    /// yields its core after each further one; zero: never (see
    /// [`Config::busy_yield_us`]).
    pub fn busy_yield(mut self, after: Duration) -> Self {
        self.0.busy_yield_us = after.as_micros() as u64;
        self
    }
    /// Latency first on or off (see [`Config::latency_first`]).
    pub fn latency_first(mut self, on: bool) -> Self {
        self.0.latency_first = on;
        self
    }
    /// Majority rule on or off.
    pub fn majority(mut self, on: bool) -> Self {
        self.0.majority = on;
        self
    }
    /// The group's secret file (see [`Security::secret_file`]).
    pub fn secret_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.0.security.secret_file = Some(path.into());
        self
    }
    /// Certificates instead of a secret: the CA's, this process's and its key (PEM
    /// files), for `identity` (see [`Security::cert_file`]).
    pub fn certificates(
        mut self,
        ca: impl Into<std::path::PathBuf>,
        cert: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
        identity: &str,
    ) -> Self {
        let s = &mut self.0.security;
        (s.ca_file, s.cert_file, s.key_file) = (Some(ca.into()), Some(cert.into()), Some(key.into()));
        s.identity = Some(identity.into());
        self
    }
    /// With certificates: the group's revocation lists (see
    /// [`Security::crl_file`]).
    pub fn revocation_list(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.0.security.crl_file = Some(path.into());
        self
    }
    /// With certificates: how often members check each other's certificates
    /// again (see [`Security::recheck_ms`]; zero: never).
    pub fn certificate_recheck(mut self, every: Duration) -> Self {
        self.0.security.recheck_ms = Some(every.as_millis() as u64);
        self
    }
    /// Discovery on or off (see [`Config::discovery`]).
    pub fn discovery(mut self, on: bool) -> Self {
        self.0.discovery = on;
        self
    }
    /// How long a node without a contact looks for its group (see
    /// [`Config::discovery_wait_ms`]).
    pub fn discovery_wait(mut self, d: Duration) -> Self {
        self.0.discovery_wait_ms = d.as_millis() as u64;
        self
    }
    /// The control address (port 0: picked by the OS).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.0.listen = addr;
        self
    }
    /// Rejoin after a removal while alive (on by default; see [`Config::rejoin`]).
    pub fn rejoin(mut self, on: bool) -> Self {
        self.0.rejoin = on;
        self
    }
    /// Sets [`Config::state_dir`].
    pub fn state_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.0.state_dir = Some(dir.into());
        self
    }
    /// Checks and returns the configuration.
    pub fn build(self) -> Result<Config, ConfigError> {
        self.0.validate()?;
        Ok(self.0)
    }
}
