//! `dds_perf --clients K`: K subscriber clients (`spindle_dds::DomainClient`, over TCP)
//! in this process, spread over the member readers, each reading every sample in
//! place as a member reader does. Members list their proxy endpoints before the
//! clients connect, so clients cost no view change; each member reports its CPU,
//! its memory at the start and end of the run and the view changes during it.

use bench::round;
use serde_json::{json, Value};
use spindle_dds::{ClientConfig, DomainClient, DomainParticipant};
use spindle_sst::sync::atomic::Ordering;
use spindle_sst::sync::lock;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Count;

/// What a member measures over a run with clients.
pub(crate) struct MemberRun {
    view0: u64,
    cpu0: Duration,
    start: Instant,
    rss0: f64,
}

/// This process's resident memory in MB (from /proc; 0 where there is none).
fn rss_mb() -> f64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<f64>().ok()))
        .unwrap_or(0.0);
    pages * 4096.0 / 1e6
}

impl MemberRun {
    /// A member with clients: says where clients connect, waits for the parent's
    /// START (its clients are in place), and starts measuring.
    pub(crate) fn start(p: &DomainParticipant, child: bool) -> Result<MemberRun, String> {
        if child {
            println!("LISTEN {}", p.group().listen_addr());
            if testkit::wait_for_parent() != "START" {
                return Err("expected START".into());
            }
        }
        Ok(MemberRun {
            view0: p.group().view().map_or(0, |v| v.id().0),
            cpu0: testkit::cpu_time(testkit::CpuClock::Process),
            start: Instant::now(),
            rss0: rss_mb(),
        })
    }

    /// The view changes so far.
    pub(crate) fn view_changes(&self, p: &DomainParticipant) -> u64 {
        p.group().view().map_or(0, |v| v.id().0).saturating_sub(self.view0)
    }

    /// Adds the run's figures to a member's result: `changes` view changes in the
    /// run (counted at its end: a reader that ended may leave the topic after).
    pub(crate) fn finish(&self, p: &DomainParticipant, changes: u64, v: &mut Value) {
        let secs = self.start.elapsed().as_secs_f64().max(1e-9);
        let cpu = testkit::cpu_time(testkit::CpuClock::Process).saturating_sub(self.cpu0).as_secs_f64();
        let m = p.group().metrics();
        v["cpu_pct"] = json!(round(100.0 * cpu / secs, 1));
        v["rss_mb_start"] = json!(round(self.rss0, 1));
        v["rss_mb_end"] = json!(round(rss_mb(), 1));
        v["clients_served"] = json!(m.clients);
        v["clients_dropped"] = json!(m.clients_dropped);
        v["view_changes_during_run"] = json!(changes);
    }
}

/// Connects `k` clients to `addrs` (round-robin), each reading topic `perf`,
/// calls `start`, and waits (up to `limit`) for every client's end marker;
/// returns one JSON value per client.
pub(crate) fn run<T: bytemuck::Pod + Send>(
    k: usize,
    addrs: &[SocketAddr],
    limit: Duration,
    start: impl FnOnce() -> Result<(), String>,
) -> Result<Vec<Value>, String> {
    let mut clients = Vec::new();
    for i in 0..k {
        let c = DomainClient::connect(ClientConfig::new(vec![addrs[i % addrs.len()]])).map_err(|e| e.to_string())?;
        let topic = c.find_pod_topic::<T>("perf").map_err(|e| e.to_string())?;
        let r = c.create_reader(&topic, topic.qos()).map_err(|e| e.to_string())?;
        let count = Arc::new(Count::default());
        let c2 = count.clone();
        let mut expect = 0u64;
        r.on_sample_in_place(move |s| c2.see(s.word(0).unwrap_or_default(), &mut expect));
        clients.push((c, r, count));
    }
    start()?;
    let done = testkit::poll_until(limit, Duration::from_millis(5), || {
        clients.iter().all(|(c, _, n)| lock(&n.last).is_some() || c.ended().is_some())
    });
    if !done {
        bench::err("dds_perf: not every client got the end marker in time");
    }
    Ok(clients
        .iter()
        .map(|(c, r, n)| {
            let secs = match (*lock(&n.first), *lock(&n.last)) {
                (Some(a), Some(b)) => (b - a).as_secs_f64().max(1e-9),
                _ => f64::INFINITY,
            };
            let got = n.n.load(Ordering::Relaxed);
            json!({
                "samples": got, "samples_per_s": round(got as f64 / secs, 0), "ended": lock(&n.last).is_some(),
                "out_of_order": n.out_of_order.load(Ordering::Relaxed), "lost": r.status().lost,
                "moves": c.failovers(), "member": c.member().0 .0,
            })
        })
        .collect())
}
