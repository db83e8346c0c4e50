//! `status`: a group's view, its members, and each member's progress and lag, as
//! the first member of the target that answers sees them.

use crate::out::{CliError, Out};
use crate::Target;
use serde_json::json;
use spindle::views::group::report::{self, GroupStatus, StatusError};
use std::time::Duration;

/// The status from the first of the target's members that answers.
pub fn ask(target: &Target) -> Result<GroupStatus, CliError> {
    let creds = crate::credentials(target)?;
    let timeout = Duration::from_secs(target.timeout);
    let mut why = Vec::new();
    for &addr in &target.connect {
        match report::ask(addr, timeout, creds.as_ref()) {
            Ok(s) => return Ok(s),
            Err(e @ StatusError::Auth { .. }) => return Err(CliError::unreachable(e.to_string())),
            Err(e) => why.push(e.to_string()),
        }
    }
    Err(CliError::unreachable(format!("no member answered: {}", why.join("; "))))
}

fn or_dash(v: Option<u64>) -> String {
    v.map_or("-".into(), |n| n.to_string())
}

pub fn run(out: &Out, target: &Target) -> Result<(), CliError> {
    let s = ask(target)?;
    out.emit(
        || {
            let view = s.view.map_or("none yet".into(), |v| v.to_string());
            let mut t = format!(
                "member n{} answered: view {view}, {} members{}\n{:>6}  {:<22} {:>12} {:>8}",
                s.node,
                s.members.len(),
                if s.stopped { " (it stopped)" } else { "" },
                "node",
                "address",
                "delivered",
                "lag"
            );
            for m in &s.members {
                let addr = m.addr.map_or("?".into(), |a| a.to_string());
                t += &format!(
                    "\n{:>6}  {addr:<22} {:>12} {:>8}",
                    format!("n{}", m.node),
                    or_dash(m.delivered),
                    or_dash(m.lag)
                );
            }
            t += &format!(
                "\n(delivered: this view's messages, in the subgroups shared with n{}; it serves {} clients now \
                 and installed {} views since it started)",
                s.node, s.clients, s.views_installed
            );
            t
        },
        || {
            json!({
                "node": s.node, "view": s.view, "stopped": s.stopped, "clients": s.clients,
                "views_installed": s.views_installed, "delivered": s.delivered,
                "members": s.members.iter().map(|m| json!({
                    "node": m.node, "addr": m.addr.map(|a| a.to_string()), "delivered": m.delivered, "lag": m.lag,
                })).collect::<Vec<_>>(),
            })
        },
    );
    Ok(())
}
