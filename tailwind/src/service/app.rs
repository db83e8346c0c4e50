//! Requests of the application that runs on a log (a state machine such as a
//! key-value store) between the log's members, over the same control plane: a
//! frame `[APP, log (u64 LE), body]` goes to the handler the application gave
//! ([`LogService::serve_app`]), and its answer comes back as it is. The log's own
//! frames start with [`super::wire::VERSION`], so the two never mix.

use super::member::LogService;
use super::node::lock;
use spindle_sst::transport::NodeId;
use std::sync::Arc;
use std::time::Duration;

/// The first byte of an application frame.
pub const APP: u8 = 0xF3;

/// Why an application request got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppError {
    /// This member runs in no group now.
    #[error("the member stopped")]
    Stopped,
    /// The request, the connection or the deadline failed (the text says which).
    #[error("request to {0} failed: {1}")]
    Failed(NodeId, String),
}

impl LogService {
    /// Answers application requests from the log's other members with `f` (see
    /// the module docs); replaces a handler given before. Requests that come
    /// while none is given get an empty answer.
    pub fn serve_app(&self, f: impl Fn(&[u8]) -> Vec<u8> + Send + Sync + 'static) {
        *lock(&self.app) = Some(Arc::new(f));
    }

    /// Sends `body` to the application handler of member `to` and waits up to
    /// `within` for its answer.
    pub fn ask_app(&self, to: NodeId, body: &[u8], within: Duration) -> Result<Vec<u8>, AppError> {
        let group = self.shared.group().ok_or(AppError::Stopped)?;
        let mut frame = Vec::with_capacity(9 + body.len());
        frame.push(APP);
        frame.extend_from_slice(&self.shared.cfg.log.to_le_bytes());
        frame.extend_from_slice(body);
        group.request_service(super::wire::SERVICE, to, &frame, within).map_err(|e| AppError::Failed(to, e.to_string()))
    }

    /// The answer to an application frame of this log (`None`: not one).
    pub(super) fn answer_app(&self, frame: &[u8]) -> Option<Vec<u8>> {
        match frame {
            [APP, rest @ ..] if rest.len() >= 8 && rest[..8] == self.shared.cfg.log.to_le_bytes() => {
                let f = lock(&self.app).clone();
                Some(f.map_or_else(Vec::new, |f| f(&rest[8..])))
            }
            _ => None,
        }
    }
}
