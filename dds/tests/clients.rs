//! DDS clients (`spindle_dds::client`): three member participants as threads of this
//! process, clients connected to them over their control ports. Every wait has a
//! deadline; shm files are removed by the transports.

use spindle_dds::DdsConfig;
use spindle_dds::{ClientConfig, DdsError, DomainClient, DomainParticipant, QosError, Sample, TopicError};
use spindle_dds::{History, Level, Qos};
use spindle_views::config::{Config, Transport};
use std::net::SocketAddr;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn member_with(
    name: &str,
    id: u32,
    contact: Option<SocketAddr>,
    limits: spindle_views::group::ClientLimits,
) -> DomainParticipant {
    let port = testkit::free_ports(1).unwrap()[0];
    let mut b = Config::builder(id, format!("127.0.0.1:{port}").parse().unwrap()).name(name).transport(Transport::Tcp);
    if let Some(c) = contact {
        b = b.contact(c);
    }
    let cfg = b.timeouts(Duration::from_millis(50), Duration::from_millis(1000)).build().unwrap();
    let mut cfg = DdsConfig::new(cfg);
    cfg.client_limits = limits;
    DomainParticipant::new(cfg).unwrap()
}

fn domain(name: &str) -> Vec<DomainParticipant> {
    domain_with(name, spindle_views::group::ClientLimits::default())
}

fn domain_with(name: &str, limits: spindle_views::group::ClientLimits) -> Vec<DomainParticipant> {
    let mut ps: Vec<DomainParticipant> = Vec::new();
    for id in 0..3 {
        let contact = ps.first().map(|p| p.group().listen_addr());
        ps.push(member_with(name, id, contact, limits));
    }
    for p in &ps {
        assert!(p.group().wait_for_members(3, WAIT));
    }
    ps
}

fn client(contacts: Vec<SocketAddr>) -> DomainClient {
    let mut cfg = ClientConfig::new(contacts);
    cfg.failover_timeout = WAIT;
    DomainClient::connect(cfg).unwrap()
}

/// What identifies a sample in every reader's sequence.
fn order(samples: &[Sample<(u32, u64)>]) -> Vec<((u64, u32, bool), u64, u64)> {
    samples.iter().map(|s| (s.info.writer.key(), s.info.seq, s.info.topic_seq)).collect()
}

/// Where `got` first differs from `0..total`, briefly (a failed check prints this
/// rather than two long lists).
fn mismatch(got: &[u64], total: u64) -> String {
    let at = got.iter().zip(0..total).position(|(g, n)| *g != n).unwrap_or(got.len().min(total as usize));
    let around = &got[at.saturating_sub(2)..(at + 3).min(got.len())];
    format!("{} of {total} read, first difference at index {at}: {around:?}", got.len())
}

fn view_ids(ps: &[DomainParticipant]) -> Vec<Option<spindle_views::view::ViewId>> {
    ps.iter().map(|p| p.group().view().map(|v| v.id())).collect()
}

type MemberReaders = Vec<spindle_dds::DataReader<(u32, u64)>>;

/// Topic `t` (Volatile, KeepAll) with a reader at every member, which serves
/// clients on it.
fn volatile_topic(ps: &[DomainParticipant]) -> (spindle_dds::Topic<(u32, u64)>, MemberReaders) {
    let qos = Qos { level: Level::Volatile, history: History::KeepAll, ..Qos::default() }.max_sample_bytes(64);
    let topic = ps[0].topic::<(u32, u64)>("t", qos).unwrap();
    let mut member_readers = Vec::new();
    for p in ps {
        let t = p.find_topic::<(u32, u64)>("t").unwrap();
        member_readers.push(p.create_reader(&t, t.qos()).unwrap());
        p.serve_clients(&t, true).unwrap();
    }
    (topic, member_readers)
}

#[test]
fn members_and_clients_read_one_order_and_clients_change_no_view() {
    let ps = domain(&format!("dc{}o", std::process::id()));
    let (topic, member_readers) = volatile_topic(&ps);
    assert!(ps[0].wait_for_matched("t", 0, 3, WAIT).is_ok());
    let before = view_ids(&ps);
    let addr = |i: usize| ps[i].group().listen_addr();
    let (r1, r2) = (client(vec![addr(2)]), client(vec![addr(0)]));
    let (w1, w2) = (client(vec![addr(0)]), client(vec![addr(1)]));
    let t = r1.find_topic::<(u32, u64)>("t").unwrap();
    assert_eq!(t.qos(), topic.qos());
    let readers = [r1.create_reader(&t, t.qos()).unwrap(), r2.create_reader(&t, t.qos()).unwrap()];
    let writers: Vec<_> = [&w1, &w2]
        .iter()
        .map(|w| w.create_writer(&w.find_topic::<(u32, u64)>("t").unwrap(), t.qos()).unwrap())
        .collect();
    // Clients' endpoints count: asked of every member that serves clients.
    let m = ps[1].matched("t").unwrap();
    assert_eq!((m.client_writers, m.client_readers, m.writers, m.readers), (2, 2, 2, 5), "{m:?}");
    assert_eq!(w1.matched("t").unwrap(), m, "a client asks its member");
    std::thread::scope(|s| {
        for (i, writer) in writers.iter().enumerate() {
            s.spawn(move || {
                if i == 0 {
                    // In batches, through the trait members' writers share.
                    let all: Vec<(u32, u64)> = (0..300u64).map(|n| (0, n)).collect();
                    for (k, chunk) in all.chunks(30).enumerate() {
                        let numbers = spindle_dds::Writer::write_batch(writer, chunk).unwrap();
                        assert_eq!(numbers, k as u64 * 30 + 1..k as u64 * 30 + 31);
                    }
                } else {
                    for n in 0..300u64 {
                        writer.write(&(i as u32, n)).unwrap();
                    }
                }
                assert!(writer.wait_for_delivery(WAIT), "every sample acknowledged");
            });
        }
    });
    let mut seqs = Vec::new();
    for r in member_readers.iter().chain(&readers) {
        let got = r.take_n(600, WAIT);
        assert_eq!(got.len(), 600, "{:?}", r.status());
        assert!(got.iter().all(|s| s.info.writer.client.is_some()), "client samples say so");
        seqs.push(order(&got));
    }
    assert!(seqs.windows(2).all(|w| w[0] == w[1]), "one order at every reader, member or client");
    let topic_seqs: Vec<u64> = seqs[0].iter().map(|x| x.2).collect();
    assert_eq!(topic_seqs, (0..600).collect::<Vec<_>>());
    // A client writer's samples keep their writer's numbering.
    let by_w1: Vec<u64> = seqs[0].iter().filter(|x| x.0 .0 == w1.id()).map(|x| x.1).collect();
    assert_eq!(by_w1, (1..=300).collect::<Vec<_>>());
    drop(readers);
    drop(writers);
    let m = ps[0].matched("t").unwrap();
    assert_eq!((m.client_writers, m.client_readers), (0, 0), "closed endpoints no longer count: {m:?}");
    drop((r1, r2, w1, w2));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(view_ids(&ps), before, "clients came and went with no view change");
}

#[test]
fn a_client_moves_when_its_member_fails_with_no_gap_and_no_duplicate() {
    let ps = domain(&format!("dc{}f", std::process::id()));
    let (topic, member_readers) = volatile_topic(&ps);
    let contacts: Vec<SocketAddr> = ps.iter().map(|p| p.group().listen_addr()).collect();
    // Both clients start at member 1, which then fails.
    let reader_client = client(vec![contacts[1], contacts[2]]);
    let writer_client = client(vec![contacts[1], contacts[0]]);
    let r = reader_client.create_reader(&reader_client.find_topic::<(u32, u64)>("t").unwrap(), topic.qos()).unwrap();
    let w = writer_client.create_writer(&writer_client.find_topic::<(u32, u64)>("t").unwrap(), topic.qos()).unwrap();
    let total = 2000u64;
    std::thread::scope(|s| {
        s.spawn(|| {
            for n in 0..total {
                w.write(&(9, n)).unwrap();
            }
        });
        // Fail member 1 once some samples are through.
        assert!(r.wait(WAIT));
        ps[1].group().shutdown();
    });
    assert!(w.wait_for_delivery(WAIT), "every sample acknowledged after the move");
    assert_eq!(w.failures(), (0, None), "a member that stops fails no sample: the client sends it again");
    assert_eq!(writer_client.failovers(), 1);
    let got = r.take_n(total as usize, WAIT);
    let ns: Vec<u64> = got.iter().map(|s| s.data.1).collect();
    assert!(
        ns.iter().copied().eq(0..total),
        "the client reader: no gap, no duplicate; {}; {:?}; {} failovers",
        mismatch(&ns, total),
        r.status(),
        reader_client.failovers()
    );
    assert_eq!(reader_client.failovers(), 1);
    assert_eq!(r.status().lost, 0);
    let topic_seqs: Vec<u64> = got.iter().map(|s| s.info.topic_seq).collect();
    assert_eq!(topic_seqs, (0..total).collect::<Vec<_>>());
    for (i, mr) in member_readers.iter().enumerate().filter(|(i, _)| *i != 1) {
        let got = mr.take_n(total as usize, WAIT);
        let ns: Vec<u64> = got.iter().map(|s| s.data.1).collect();
        assert!(ns.iter().copied().eq(0..total), "member {i}: each written sample once; {}", mismatch(&ns, total));
    }
}

#[test]
fn hostile_client_calls_are_refused_and_the_members_go_on() {
    use spindle_views::client::{Client, ClientError};
    let ps = domain(&format!("dc{}h", std::process::id()));
    let qos = Qos { level: Level::Ordered, ..Qos::default() }.max_sample_bytes(16);
    let t = ps[0].topic::<(u32, u64)>("t", qos).unwrap();
    let reader = ps[0].create_reader(&t, t.qos()).unwrap();
    ps[0].serve_clients(&t, true).unwrap();
    let addr = ps[0].group().listen_addr();
    let before = view_ids(&ps);
    // Garbage requests get a refusal (the same few bytes each: a typed "malformed",
    // no text); the session goes on answering.
    let raw = Client::connect(&[addr], WAIT).unwrap();
    let replies: Vec<Vec<u8>> = [&b""[..], &[0xff; 40], &[3, 200, 200, 200, 200, 200], &[]]
        .iter()
        .map(|body| raw.request(body, WAIT).unwrap())
        .collect();
    assert!(replies.iter().all(|r| *r == replies[0] && r.len() <= 4), "{replies:?}");
    // A post that is no write, and a write for a writer it never registered, end it.
    for bad in [vec![0xee; 9], vec![5, 0, 1, 1, 0]] {
        let c = Client::connect(&[addr], WAIT).unwrap();
        c.post(&bad).unwrap();
        let end = (0..300).find_map(|_| c.recv_push(Duration::from_millis(100)).err());
        assert!(matches!(end, Some(ClientError::Dropped(_))), "{end:?}");
    }
    // A client cannot offer more than the topic's level, nor open an unknown topic,
    // nor write more than a sample may hold.
    let c = client(vec![addr]);
    let t2 = c.find_topic::<(u32, u64)>("t").unwrap();
    let strong = Qos { level: Level::Logged, ..t2.qos() };
    let above = c.create_writer(&t2, strong).err();
    assert!(matches!(above, Some(DdsError::Qos(QosError::AboveTopic { offered: Level::Logged, .. }))), "{above:?}");
    let nope = c.find_topic::<(u32, u64)>("nope").err();
    assert!(matches!(&nope, Some(DdsError::Topic { topic, why: TopicError::NoSuchTopic }) if topic == "nope"));
    let other = c.find_topic::<String>("t").err();
    assert!(matches!(other, Some(DdsError::Topic { why: TopicError::TypeMismatch { .. }, .. })), "another type");
    let bytes = c.find_topic::<Vec<u8>>("t");
    assert!(bytes.is_err());
    let w = c.create_writer(&t2, t2.qos()).unwrap();
    w.write(&(1, 2)).unwrap();
    assert!(w.wait_for_delivery(WAIT));
    let got = reader.take_n(1, WAIT);
    assert_eq!(got[0].data, (1, 2));
    assert_eq!(got[0].info.writer.client, Some(c.id()));
    assert_eq!(view_ids(&ps), before, "no view change");
}

#[test]
fn a_client_reader_that_stops_reading_is_dropped_and_moves_on_without_a_gap() {
    let limits = spindle_views::group::ClientLimits { buffer_bytes: 1 << 20, ..Default::default() };
    let ps = domain_with(&format!("dc{}s", std::process::id()), limits);
    let qos = Qos { level: Level::Volatile, history: History::KeepAll, ..Qos::default() }.max_sample_bytes(1024);
    let topic = ps[0].topic::<Vec<u8>>("t", qos).unwrap();
    for p in &ps {
        p.serve_clients(&p.find_topic::<Vec<u8>>("t").unwrap(), false).unwrap();
    }
    let writer = ps[0].create_writer(&topic, topic.qos()).unwrap();
    let contacts: Vec<SocketAddr> = ps.iter().map(|p| p.group().listen_addr()).collect();
    let c = client(vec![contacts[1], contacts[2]]);
    let r = c.create_reader(&c.find_topic::<Vec<u8>>("t").unwrap(), topic.qos()).unwrap();
    // A listener that blocks stalls the client's receiving thread: its member's
    // buffer for it fills and the member drops it.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = std::sync::Mutex::new(rx);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s2 = seen.clone();
    r.on_data_available(move |s| {
        if s.info.topic_seq == 10 {
            let _ = rx.lock().unwrap().recv_timeout(WAIT);
        }
        s2.lock().unwrap().push(s.info.topic_seq);
    });
    // 24 MB of samples: past the member's 1 MiB buffer, the sockets' buffers and
    // the client's queue of 4096 events.
    let total = 24_000u64;
    for n in 0..total {
        writer.write(&vec![(n % 251) as u8; 1000]).unwrap();
    }
    assert!(writer.wait_for_delivery(WAIT), "the writer was not held up by the stalled client");
    let dropped = testkit::poll_until(WAIT, Duration::from_millis(10), || ps[1].group().metrics().clients_dropped > 0);
    assert!(dropped, "the member dropped the stalled client");
    tx.send(()).unwrap();
    let all = testkit::poll_until(WAIT, Duration::from_millis(10), || seen.lock().unwrap().len() as u64 >= total);
    assert!(
        all,
        "the client moved and caught up: {} of {total}; moves {}, ended {:?}, {:?}, member {:?}",
        seen.lock().unwrap().len(),
        c.failovers(),
        c.ended(),
        r.status(),
        c.member()
    );
    assert_eq!(*seen.lock().unwrap(), (0..total).collect::<Vec<_>>(), "no gap, no duplicate");
    assert!(c.failovers() >= 1);
    assert_eq!(r.status().lost, 0);
}

#[test]
fn a_new_client_reader_gets_the_history_held_and_loses_nothing() {
    let ps = domain(&format!("dc{}k", std::process::id()));
    let qos = Qos { level: Level::Volatile, history: History::KeepLast(5), ..Qos::default() }.max_sample_bytes(64);
    let topic = ps[0].topic::<(u32, u64)>("t", qos).unwrap();
    let w = ps[0].create_writer(&topic, topic.qos()).unwrap();
    for n in 0..20 {
        w.write(&(0, n)).unwrap();
    }
    assert!(w.wait_for_delivery(WAIT));
    let c = client(vec![ps[0].group().listen_addr()]);
    let r = c.create_reader(&c.find_topic::<(u32, u64)>("t").unwrap(), topic.qos()).unwrap();
    let got = r.take_n(5, WAIT);
    let ns: Vec<u64> = got.iter().map(|s| s.data.1).collect();
    assert_eq!(ns, (15..20).collect::<Vec<_>>(), "the five samples the topic keeps");
    assert!(got.iter().all(|s| s.info.from_history));
    assert_eq!(r.status().lost, 0, "a new reader has lost nothing (a member's new reader gets the same)");
    w.write(&(0, 20)).unwrap();
    let live = r.take_n(1, WAIT);
    assert_eq!((live[0].data.1, live[0].info.topic_seq, live[0].info.from_history), (20, 20, false));
}

#[test]
fn a_client_writer_below_a_readers_request_is_reported_on_both_sides() {
    let ps = domain(&format!("dc{}q", std::process::id()));
    let qos = Qos { level: Level::Volatile, ..Qos::default() }.max_sample_bytes(64);
    let topic = ps[0].topic::<(u32, u64)>("t", qos).unwrap();
    ps[0].serve_clients(&topic, true).unwrap();
    let strict = ps[0].create_reader(&topic, topic.qos()).unwrap(); // requests Volatile
    let lax = ps[0].create_reader(&topic, Qos { level: Level::Unordered, ..topic.qos() }).unwrap();
    let c = client(vec![ps[0].group().listen_addr()]);
    let t = c.find_topic::<(u32, u64)>("t").unwrap();
    let w = c.create_writer(&t, Qos { level: Level::Ordered, ..t.qos() }).unwrap();
    let bad = w.incompatible_qos();
    assert_eq!(bad.total_count, 1, "{bad:?}");
    assert_eq!(bad.current[0].0, spindle_dds::WriterId { node: ps[0].node(), id: 0, client: None });
    assert_eq!(bad.current[0].1, Level::Volatile);
    w.write(&(1, 1)).unwrap();
    assert!(w.wait_for_delivery(WAIT));
    assert_eq!(lax.take_n(1, WAIT).len(), 1, "the lax reader gets it");
    assert!(strict.take().is_empty(), "the strict reader does not");
    let seen = strict.incompatible_qos();
    assert_eq!(
        seen.current,
        vec![(spindle_dds::WriterId { node: ps[0].node(), id: 0, client: Some(c.id()) }, Level::Ordered)]
    );
}
