//! A domain's replicated logs read by DDS clients (`spindle_dds::ClientLog`): three
//! member participants as threads of this process (tcp), a log on two of them, one
//! client connected to the member that does not hold the log (its reads go to a
//! replica) and one to a replica. Tails see every committed record once, in order;
//! a trimmed record and a log the domain lacks are clear errors. Every wait has a
//! deadline; the segment directories are removed by the test.

use spindle_dds::DdsConfig;
use spindle_dds::{log_members, LogQos};
use spindle_dds::{ClientConfig, ClientTail, DdsError, DomainClient, DomainParticipant, TopicError};
use spindle_tailwind::service::Lsn;
use spindle_views::config::{Config, Transport};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn participant(name: &str, id: u32, contact: Option<SocketAddr>, dir: &Path) -> DomainParticipant {
    let mut b = Config::builder(id, testkit::free_control_addr()).name(name).transport(Transport::Tcp);
    if let Some(c) = contact {
        b = b.contact(c);
    }
    let mut cfg = DdsConfig::new(b.timeouts(Duration::from_millis(50), Duration::from_millis(1000)).build().unwrap());
    cfg.log_dir = dir.to_path_buf();
    DomainParticipant::new(cfg).unwrap()
}

fn client(at: SocketAddr) -> DomainClient {
    let mut cfg = ClientConfig::new(vec![at]);
    cfg.failover_timeout = WAIT;
    DomainClient::connect(cfg).unwrap()
}

fn record(i: u64) -> Vec<u8> {
    format!("order {i} {}", "x".repeat((i % 40) as usize)).into_bytes()
}

/// Pulls `n` records from a tail (bounded), checking their numbers go on from `from`.
fn pull(tail: &mut ClientTail, from: u64, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let (lsn, bytes) = tail.next_within(WAIT).expect("a committed record in time").unwrap();
            assert_eq!(lsn, Lsn(from + i as u64));
            bytes
        })
        .collect()
}

#[test]
fn clients_tail_a_log_through_replicas_and_others() {
    let dirs = testkit::TempDirs::new(&format!("dds-client-logs-{}", std::process::id()), 1);
    let name = format!("ddscl{}", std::process::id());
    let mut ps = vec![participant(&name, 0, None, &dirs[0])];
    let contact = ps[0].group().listen_addr();
    for id in 1..3 {
        ps.push(participant(&name, id, Some(contact), &dirs[0]));
    }
    assert!(ps[0].group().wait_for_members(3, WAIT));
    // Two replicas, small buffers (segments rotate, so a trim removes some).
    let qos = LogQos { replicas: 2, buffer_bytes: 4096, ..LogQos::default() };
    let logs: Vec<_> = ps.iter().map(|p| p.create_log("orders", qos).unwrap()).collect();
    assert!(logs[0].ready(WAIT).is_some(), "the log has a primary");
    let replicas = log_members("orders", 2, &ps[0].group().view().unwrap());
    let outside = ps.iter().position(|p| !replicas.contains(&p.node())).expect("one participant holds no copy");
    let inside = ps.iter().position(|p| replicas.contains(&p.node())).unwrap();
    assert!(!logs[outside].is_replica() && logs[inside].is_replica());

    let far = client(ps[outside].group().listen_addr());
    let near = client(ps[inside].group().listen_addr());
    let mut tails = [far.log("orders").subscribe(Lsn(0)), near.log("orders").subscribe(Lsn(0))];
    assert!(tails[0].next_within(Duration::from_millis(50)).is_none(), "nothing committed yet");
    assert_eq!(far.log("orders").read(Lsn(0), 1 << 20).unwrap(), Vec::new());

    // 300 records, appended at every participant (forwarded to the primary).
    let mut acked = Vec::new();
    for i in 0..300u64 {
        let lsn = logs[i as usize % 3].append(&record(i)).unwrap();
        assert_eq!(lsn, Lsn(i));
        acked.push(record(i));
    }
    for (k, tail) in tails.iter_mut().enumerate() {
        assert_eq!(pull(tail, 0, 300), acked, "tail {k}");
        assert!(tail.next_within(Duration::from_millis(20)).is_none(), "tail {k}: nothing more");
    }
    // More while they wait; a page from the middle; a small page is one record.
    for i in 300..340u64 {
        logs[0].append(&record(i)).unwrap();
        acked.push(record(i));
    }
    for (k, tail) in tails.iter_mut().enumerate() {
        assert_eq!(pull(tail, 300, 40), acked[300..], "tail {k}");
    }
    let page = far.log("orders").read(Lsn(150), 1 << 20).unwrap();
    assert!(!page.is_empty() && page[0].0 == Lsn(150));
    assert_eq!(page.iter().map(|r| r.1.clone()).collect::<Vec<_>>(), acked[150..150 + page.len()]);
    assert_eq!(near.log("orders").read(Lsn(339), 1).unwrap(), vec![(Lsn(339), acked[339].clone())]);

    // Trimmed records are a clear error at both clients; what is left reads on.
    assert!(logs[inside].trim(Lsn(200)).unwrap() > 0, "segments below 200 removed");
    for c in [&far, &near] {
        let e = c.log("orders").read(Lsn(0), 1 << 20).unwrap_err();
        assert!(matches!(&e, DdsError::Trimmed { log, lsn: 0 } if log == "orders"), "{e}");
        let mut t = c.log("orders").subscribe(Lsn(0));
        assert!(matches!(t.next_within(WAIT), Some(Err(DdsError::Trimmed { lsn: 0, .. }))));
        assert!(t.next().is_none(), "a tail ends after its error");
        assert_eq!(c.log("orders").read(Lsn(339), 1 << 20).unwrap().len(), 1);
    }
    // A log the domain lacks.
    let e = far.log("no-such-log").read(Lsn(0), 10).unwrap_err();
    assert!(matches!(&e, DdsError::Topic { topic, why: TopicError::NoSuchLog } if topic == "no-such-log"), "{e}");
    let mut t = near.log("no-such-log").subscribe(Lsn(0));
    assert!(matches!(t.next_within(WAIT), Some(Err(DdsError::Topic { .. }))));
    drop(tails);
    drop((far, near));
    drop(logs);
}
