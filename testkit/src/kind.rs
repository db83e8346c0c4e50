//! Which transport a group runs on, by its command-line name.

/// Which transport a group uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// Threads of one process.
    Mem,
    /// Processes sharing /dev/shm.
    Shm,
    /// Processes connected by tcp on 127.0.0.1.
    Tcp,
    /// Nodes with RDMA queue pairs (the `rdma` feature and a device; see
    /// `transport::rdma`), set up over 127.0.0.1.
    Rdma,
}

impl TransportKind {
    /// The name used on command lines.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Mem => "mem",
            TransportKind::Shm => "shm",
            TransportKind::Tcp => "tcp",
            TransportKind::Rdma => "rdma",
        }
    }
}

impl std::str::FromStr for TransportKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "mem" => Ok(TransportKind::Mem),
            "shm" => Ok(TransportKind::Shm),
            "tcp" => Ok(TransportKind::Tcp),
            "rdma" => Ok(TransportKind::Rdma),
            other => Err(format!("unknown transport {other:?} (expected mem, shm, tcp or rdma)")),
        }
    }
}

impl std::fmt::Display for TransportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
