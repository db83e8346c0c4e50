//! Samples of 1 MiB and 16 MiB (default QoS limits: slots stay 1 KB, the samples go
//! through each writer's arena): written by a member and by a client, read at every
//! member (from a queue, and in place) and at a client, in one order and whole, over
//! shm and tcp. Members are threads of this process; every wait has a deadline.

use spindle_dds::DdsConfig;
use spindle_dds::Qos;
use spindle_dds::{ClientConfig, DomainClient, DomainParticipant, Sample};
use spindle_views::config::{Config, Transport};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);
const MIB: usize = 1 << 20;

fn member(name: &str, id: u32, contact: Option<SocketAddr>, t: Transport) -> DomainParticipant {
    let port = testkit::free_ports(1).unwrap()[0];
    let mut b = Config::builder(id, format!("127.0.0.1:{port}").parse().unwrap()).name(name).transport(t);
    if let Some(c) = contact {
        b = b.contact(c);
    }
    let cfg = b.timeouts(Duration::from_millis(50), Duration::from_millis(1000)).build().unwrap();
    let mut cfg = DdsConfig::new(cfg);
    // Every sample this test writes (20 MiB in all) fits in a client's outbox
    // however late the machine runs the session's writer thread: with the 8 MiB
    // default a 16 MiB sample behind an undrained 1 MiB one drops the client, as
    // documented (and tested in clients.rs), which a loaded machine made happen.
    cfg.client_limits.buffer_bytes = 64 * MIB;
    DomainParticipant::new(cfg).unwrap()
}

/// Sample `i` of writer `tag`: its name in the first 8 bytes and the last 8, a
/// pattern of both between.
fn blob(tag: u8, i: u32, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len).map(|j| (j as u8).wrapping_mul(13) ^ tag ^ i as u8).collect();
    let name = (u64::from(tag) << 32 | u64::from(i)).to_le_bytes();
    v[..8].copy_from_slice(&name);
    let n = v.len();
    v[n - 8..].copy_from_slice(&name);
    v
}

/// (writer key, seq, length, whole?) of each sample.
type Seen = (u64, u32, usize, bool);

fn seen(s: &Sample<Vec<u8>>) -> Seen {
    let d = &s.data;
    let name = u64::from_le_bytes(d[..8].try_into().unwrap());
    let whole = *d == blob((name >> 32) as u8, name as u32, d.len());
    (s.info.writer.key().0 ^ u64::from(s.info.writer.key().1), s.info.seq as u32, d.len(), whole)
}

fn take_all(r: &spindle_dds::DataReader<Vec<u8>>, n: usize) -> Vec<Seen> {
    let deadline = Instant::now() + WAIT;
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        got.extend(r.take_n(n - got.len(), Duration::from_millis(200)).iter().map(seen));
    }
    got
}

fn large_samples(t: Transport) {
    let name = format!("dl{}{}", std::process::id(), t as u8);
    let mut ps: Vec<DomainParticipant> = Vec::new();
    for id in 0..3 {
        let contact = ps.first().map(|p| p.group().listen_addr());
        ps.push(member(&name, id, contact, t));
    }
    for p in &ps {
        assert!(p.group().wait_for_members(3, WAIT));
    }
    let qos = Qos::ordered();
    assert!(qos.max_sample_bytes as usize >= 64 * MIB, "the default limit holds 64 MiB samples");
    let topic = ps[0].topic::<Vec<u8>>("big", qos).unwrap();
    let mut readers = Vec::new();
    for p in &ps[..2] {
        let t = p.find_topic::<Vec<u8>>("big").unwrap();
        readers.push(p.create_reader(&t, t.qos()).unwrap());
        p.serve_clients(&t, true).unwrap();
    }
    // Member 2 reads in place: the sample decoded straight out of the writer's arena.
    let t2 = ps[2].find_topic::<Vec<u8>>("big").unwrap();
    let in_place = ps[2].create_reader(&t2, t2.qos()).unwrap();
    let log: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let l = log.clone();
    in_place.on_sample_in_place(move |s| {
        let data = s.get().expect("a whole sample");
        let sample = Sample { data, info: *s.info() };
        l.lock().unwrap().push(seen(&sample));
    });
    let c = DomainClient::connect(ClientConfig::new(vec![ps[1].group().listen_addr()])).unwrap();
    let ct = c.find_topic::<Vec<u8>>("big").unwrap();
    let client_reader = c.create_reader(&ct, ct.qos()).unwrap();
    let client_writer = c.create_writer(&ct, ct.qos()).unwrap();
    let w = ps[0].create_writer(&topic, topic.qos()).unwrap();
    assert!(ps[0].wait_for_matched("big", 2, 4, WAIT).is_ok(), "{:?}", ps[0].matched("big"));
    let sizes = [MIB, 16 * MIB, MIB];
    std::thread::scope(|s| {
        s.spawn(|| {
            for (i, len) in sizes.iter().enumerate() {
                w.write(&blob(1, i as u32, *len)).unwrap();
            }
        });
        s.spawn(|| {
            for i in 0..2 {
                client_writer.write(&blob(2, i, MIB)).unwrap();
            }
        });
    });
    let n = sizes.len() + 2;
    let first = take_all(&readers[0], n);
    assert_eq!(first.len(), n, "every sample at member 0");
    assert!(first.iter().all(|s| s.3), "whole: {first:?}");
    assert!(first.iter().any(|s| s.2 == 16 * MIB));
    assert_eq!(take_all(&readers[1], n), first, "member 1: the same samples in the same order");
    assert_eq!(take_all(&client_reader, n), first, "the client: the same samples in the same order");
    let deadline = Instant::now() + WAIT;
    while log.lock().unwrap().len() < n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(*log.lock().unwrap(), first, "member 2, in place: the same");

    // Zero copies: a raw sample built in the writer's arena, read out of it in place.
    let raw = ps[0].pod_topic::<u8>("raw", Qos::ordered()).unwrap();
    let got: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let g = got.clone();
    let rt = ps[1].find_pod_topic::<u8>("raw").unwrap();
    let rr = ps[1].create_reader(&rt, rt.qos()).unwrap();
    rr.on_sample_in_place(move |s| {
        let mut buf = vec![0u8; s.len()];
        s.read_bytes(0, &mut buf);
        g.lock().unwrap().push(buf);
    });
    let rw = ps[0].create_writer(&raw, raw.qos()).unwrap();
    assert!(ps[0].wait_for_matched("raw", 1, 1, WAIT).is_ok());
    let frame = blob(3, 0, 3 * MIB);
    rw.write_in_place(frame.len(), |s| s.write(0, &frame)).unwrap();
    let deadline = Instant::now() + WAIT;
    while got.lock().unwrap().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(*got.lock().unwrap(), vec![frame], "written and read in place, whole");
    let topic_qos = Qos::ordered().max_sample_bytes(1024);
    let small = ps[0].pod_topic::<u8>("small", topic_qos).unwrap();
    let sw = ps[0].create_writer(&small, small.qos()).unwrap();
    assert!(matches!(sw.write_in_place(1025, |_| {}), Err(spindle_dds::DdsError::TooLarge { len: 1025, max: 1024 })));
}

#[test]
fn shm_samples_of_1_and_16_mib_reach_members_and_clients_in_order() {
    large_samples(Transport::Shm);
}

#[test]
fn tcp_samples_of_1_and_16_mib_reach_members_and_clients_in_order() {
    large_samples(Transport::Tcp);
}
