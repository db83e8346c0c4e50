//! A participant's handles on the domain's replicated logs.

use super::Participant;
use crate::logs::ReplicatedLog;
use crate::DdsError;
use spindle_views::view::View;
use std::sync::Arc;

impl Participant {
    /// A handle on log `name` of `view`'s table (this member of it started if
    /// the install thread has not yet).
    pub(crate) fn log_handle(self: &Arc<Self>, name: &str, view: &View) -> Result<ReplicatedLog, DdsError> {
        let me = self.shared.me();
        if let Some((log, why)) = self.shared.logs.ensure(view, me, &self.shared.log_dir, Some(&self.group)).pop() {
            return Err(DdsError::LogStart { log, why });
        }
        match self.shared.logs.get(name) {
            Some((entry, service)) => Ok(ReplicatedLog { entry, service, _p: self.clone() }),
            None => Err(DdsError::Topic { topic: name.into(), why: crate::error::TopicError::NoSuchLog }),
        }
    }
}
