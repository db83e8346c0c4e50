//! Replicated logs in a domain (`spindle_dds::logs`), participants as threads of one
//! process: two logs with different primaries beside a topic, appends from every
//! participant (forwarded to the primary), reads at every replica, a log created
//! while samples flow, a participant removed (its logs go on with the acknowledged
//! records), and bad input. Every wait has a deadline; shm files are removed by the
//! transports, segment directories by the test.

use spindle_dds::DdsConfig;
use spindle_dds::Qos;
use spindle_dds::{log_members, LogQos};
use spindle_dds::{DdsError, DomainParticipant, QosError, TopicError};
use spindle_tailwind::service::Lsn;
use spindle_views::config::{Config, Transport};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use testkit::poll_until;

const WAIT: Duration = Duration::from_secs(30);

fn participant(domain: &str, id: u32, contact: Option<SocketAddr>, t: Transport, dir: &Path) -> DomainParticipant {
    let mut b = Config::builder(id, testkit::free_control_addr())
        .name(domain)
        .transport(t)
        .timeouts(Duration::from_millis(50), Duration::from_millis(1000));
    if let Some(c) = contact {
        b = b.contact(c);
    }
    let mut cfg = DdsConfig::new(b.build().unwrap());
    cfg.log_dir = dir.to_path_buf();
    DomainParticipant::new(cfg).unwrap()
}

fn domain(name: &str, n: u32, t: Transport, dir: &Path) -> Vec<DomainParticipant> {
    let first = participant(name, 0, None, t, dir);
    let contact = Some(first.group().listen_addr());
    let mut all = vec![first];
    for id in 1..n {
        all.push(participant(name, id, contact, t, dir));
    }
    assert!(all[0].group().wait_for_members(n as usize, WAIT));
    all
}

fn small() -> LogQos {
    LogQos { replicas: 3, buffer_bytes: 64 << 10, buffers: 2, ..LogQos::default() }
}

/// Two log names whose primaries differ among the first `n` members.
fn two_names(p: &DomainParticipant) -> (String, String) {
    let view = p.group().view().unwrap();
    let names: Vec<String> = (0..32).map(|i| format!("log-{i}")).collect();
    let first = &names[0];
    let p0 = log_members(first, 3, &view)[0];
    let second = names.iter().find(|n| log_members(n, 3, &view)[0] != p0).expect("32 names, one primary");
    (first.clone(), second.clone())
}

fn records(log: &spindle_dds::ReplicatedLog) -> Vec<Vec<u8>> {
    log.read_from(Lsn(0)).map(|r| r.expect("a readable log").1).collect()
}

fn two_logs_beside_a_topic(t: Transport) {
    let dir = std::env::temp_dir().join(format!("dds-logs-{}-{}", std::process::id(), t as u8));
    let name = format!("ddsl{}{}", std::process::id(), t as u8);
    let ps = domain(&name, 4, t, &dir);
    let (a, b) = two_names(&ps[0]);
    let topic: Vec<_> = ps.iter().map(|p| p.topic::<u64>("ticks", Qos::ordered()).unwrap()).collect();
    let w = ps[0].create_writer(&topic[0], topic[0].qos()).unwrap();
    let r = ps[3].create_reader(&topic[3], topic[3].qos()).unwrap();
    assert!(ps[3].wait_for_matched("ticks", 1, 1, WAIT).is_ok());
    let la: Vec<_> = ps.iter().map(|p| p.create_log(&a, small()).unwrap()).collect();
    // The second log is created while the topic flows.
    for i in 0..50u64 {
        w.write(&i).unwrap();
    }
    let lb: Vec<_> = ps.iter().map(|p| p.create_log(&b, small()).unwrap()).collect();
    for i in 50..100u64 {
        w.write(&i).unwrap();
    }
    let pa = la[0].ready(WAIT).expect("log a has a primary");
    let pb = lb[0].ready(WAIT).expect("log b has a primary");
    assert_ne!(pa, pb, "the two logs' primaries");
    let view = ps[0].group().view().unwrap();
    assert_eq!(pa, log_members(&a, 3, &view)[0]);
    // Every participant appends to both (non-primaries forward).
    let mut want_a = Vec::new();
    for round in 0..5 {
        for (i, l) in la.iter().enumerate() {
            let rec = format!("a{round}-{i}").into_bytes();
            let lsn = l.append(&rec).unwrap();
            assert_eq!(lsn, Lsn(want_a.len() as u64));
            want_a.push(rec);
        }
        for (i, l) in lb.iter().enumerate() {
            l.append_batch(&[format!("b{round}-{i}").as_bytes(), b"x"]).unwrap();
        }
    }
    // The replicas hold the same records (the non-replica holds none).
    for (l, p) in la.iter().zip(&ps) {
        assert!(l.qos() == small() && l.name() == a);
        if l.is_replica() {
            assert_eq!(records(l), want_a, "log a at {}", p.node());
        }
    }
    // A tailing reader at a backup of log a (not the victim below) sees the same.
    let tailer = la.iter().position(|l| l.is_replica() && l.node() != pa).unwrap();
    let mut tail = la[tailer].subscribe(Lsn(0));
    for (i, want) in want_a.iter().enumerate() {
        let (lsn, got) = tail.next_within(WAIT).expect("committed in time").unwrap();
        assert_eq!((lsn, &got), (Lsn(i as u64), want));
    }
    let replicas_b: Vec<_> = lb.iter().filter(|l| l.is_replica()).collect();
    assert_eq!(replicas_b.len(), 3);
    for l in &replicas_b {
        assert_eq!(records(l).len(), 40);
    }
    // The topic went on in order through both logs' creation.
    let mut got = Vec::new();
    assert!(poll_until(WAIT, Duration::from_millis(5), || {
        got.extend(r.take().into_iter().map(|s| s.data));
        got.len() >= 100
    }));
    assert_eq!(got, (0..100).collect::<Vec<u64>>());
    // Bad input: another QoS, an empty name, a log that does not exist.
    let why = |r: Result<_, DdsError>| match r {
        Err(DdsError::Topic { why, .. }) => Some(why),
        _ => None,
    };
    let other = why(ps[1].create_log(&a, LogQos::default()));
    assert!(matches!(other, Some(TopicError::LogQosMismatch { .. })), "{other:?}");
    assert!(matches!(why(ps[1].create_log("", small())), Some(TopicError::NameLength { len: 0, .. })));
    let none = why(ps[1].create_log("z", LogQos { replicas: 0, ..small() }));
    assert!(matches!(none, Some(TopicError::Qos(QosError::Replicas { value: 0, .. }))), "{none:?}");
    assert_eq!(why(ps[1].find_log("no such log")), Some(TopicError::NoSuchLog));
    assert_eq!(ps[2].find_log(&a).unwrap().name(), a);

    // The primary of log a goes (its group stops: the others remove it); log a
    // moves to the next replica with every acknowledged record, log b and the
    // topic go on.
    let victim = ps.iter().position(|p| p.node() == pa).unwrap();
    drop((la, lb));
    ps[victim].group().shutdown();
    let alive: Vec<usize> = (0..4).filter(|i| *i != victim).collect();
    let la: Vec<_> = alive.iter().map(|i| ps[*i].find_log(&a).unwrap()).collect();
    assert!(poll_until(WAIT, Duration::from_millis(10), || la[0]
        .ready(Duration::from_millis(100))
        .is_some_and(|p| p != pa)));
    let lsn = la[0].append(b"after").unwrap();
    assert_eq!(lsn, Lsn(want_a.len() as u64));
    // The tail went on through the failover (its member survived).
    let (lsn2, got) = tail.next_within(WAIT).expect("committed in time").unwrap();
    assert_eq!((lsn2, got.as_slice()), (lsn, &b"after"[..]));
    drop(tail);
    want_a.push(b"after".to_vec());
    let mut replicas = 0;
    for l in la.iter().filter(|l| l.is_replica()) {
        assert_eq!(records(l), want_a);
        replicas += 1;
    }
    assert_eq!(replicas, 3, "log a has three replicas again");
    let lb = ps[alive[0]].find_log(&b).unwrap();
    lb.append(b"b after").unwrap();
    drop((la, lb, w, r));
    drop(ps);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_logs_beside_a_topic_shm() {
    two_logs_beside_a_topic(Transport::Shm);
}

#[test]
fn two_logs_beside_a_topic_tcp() {
    two_logs_beside_a_topic(Transport::Tcp);
}
