//! What the store's tests share: members of one log as threads of this process,
//! and waiting for a store to apply the committed log.

#![allow(dead_code)]

use spindle_kv::{Store, StoreError};
use spindle_tailwind::service::{TailwindConfig, TailwindLog};
use spindle_views::config::{Config, Transport};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub const WAIT: Duration = Duration::from_secs(30);

pub fn log_over(
    name: &str,
    id: u32,
    contact: Option<std::net::SocketAddr>,
    dir: &std::path::Path,
    t: Transport,
) -> Arc<TailwindLog> {
    let mut b = Config::builder(id, testkit::free_control_addr())
        .name(name)
        .transport(t)
        .timeouts(Duration::from_millis(50), Duration::from_millis(500));
    if let Some(c) = contact {
        b = b.contact(c);
    }
    let mut cfg = TailwindConfig::new(dir.join("log"));
    cfg.buffer = 64 * 1024; // segments rotate during the test
    Arc::new(TailwindLog::start(b.build().unwrap(), cfg).unwrap())
}

pub type Kv = Store<TailwindLog>;

/// Members 0-2 of a log in `dirs`, with a primary.
pub fn three_logs(name: &str, dirs: &[std::path::PathBuf], t: Transport) -> Vec<Arc<TailwindLog>> {
    let l0 = log_over(name, 0, None, &dirs[0], t);
    let contact = l0.group().listen_addr();
    let mut logs = vec![l0];
    for i in 1..3 {
        logs.push(log_over(name, i, Some(contact), &dirs[i as usize], t));
    }
    assert!(logs[0].group().wait_for_members(3, WAIT));
    assert!(logs[0].wait_for_primary(WAIT).is_some());
    logs
}

/// Waits until `s` applied everything the log had committed. `Store::sync` gives
/// up after the log's append timeout (10 s) and says so (`NotApplied`); on a
/// loaded machine that is not a failure, so this asks again, up to a minute.
pub fn synced(s: &Kv) {
    let mut last = None;
    let ok = testkit::poll_until(2 * WAIT, Duration::from_millis(10), || match s.sync() {
        Ok(()) => true,
        Err(e @ StoreError::NotApplied(_)) => {
            last = Some(e);
            false
        }
        Err(e) => panic!("sync: {e}"),
    });
    assert!(ok, "the store did not apply the committed log within a minute: {last:?}");
}

pub fn contents(s: &Kv) -> BTreeMap<Vec<u8>, Vec<u8>> {
    synced(s);
    s.scan(b"", usize::MAX).unwrap().into_iter().collect()
}
