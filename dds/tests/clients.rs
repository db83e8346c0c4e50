//! DDS clients (`dds::client`): three member participants as threads of this
//! process, clients connected to them over their control ports. Every wait has a
//! deadline; shm files are removed by the transports.

use dds::config::DdsConfig;
use dds::qos::{History, Level, Qos};
use dds::{ClientConfig, DomainClient, DomainParticipant, Sample};
use std::net::SocketAddr;
use std::time::Duration;
use views::config::{Config, Transport};

const WAIT: Duration = Duration::from_secs(30);

fn member(name: &str, id: u32, contact: Option<SocketAddr>) -> DomainParticipant {
    let port = testkit::free_ports(1).unwrap()[0];
    let mut b = Config::builder(id, format!("127.0.0.1:{port}").parse().unwrap()).name(name).transport(Transport::Tcp);
    if let Some(c) = contact {
        b = b.contact(c);
    }
    let cfg = b.timeouts(Duration::from_millis(50), Duration::from_millis(1000)).build().unwrap();
    DomainParticipant::new(DdsConfig::new(cfg)).unwrap()
}

fn domain(name: &str) -> Vec<DomainParticipant> {
    let mut ps: Vec<DomainParticipant> = Vec::new();
    for id in 0..3 {
        let contact = ps.first().map(|p| p.group().listen_addr());
        ps.push(member(name, id, contact));
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

fn view_ids(ps: &[DomainParticipant]) -> Vec<Option<views::view::ViewId>> {
    ps.iter().map(|p| p.group().view().map(|v| v.id())).collect()
}

#[test]
fn members_and_clients_read_one_order_and_clients_change_no_view() {
    let ps = domain(&format!("dc{}o", std::process::id()));
    let qos = Qos { level: Level::Volatile, history: History::KeepAll, ..Qos::default() }.max_sample_bytes(64);
    let topic = ps[0].topic::<(u32, u64)>("t", qos).unwrap();
    let mut member_readers = Vec::new();
    for p in &ps {
        let t = p.find_topic::<(u32, u64)>("t").unwrap();
        member_readers.push(p.create_reader(&t, t.qos()).unwrap());
        p.serve_clients(&t).unwrap();
    }
    assert!(ps[0].wait_for_matched("t", 0, 3, WAIT));
    let before = view_ids(&ps);
    let addr = |i: usize| ps[i].group().listen_addr();
    let (r1, r2) = (client(vec![addr(2)]), client(vec![addr(0)]));
    let (w1, w2) = (client(vec![addr(0)]), client(vec![addr(1)]));
    let t = r1.find_topic::<(u32, u64)>("t").unwrap();
    assert_eq!(t.qos(), topic.qos());
    let readers = [r1.create_reader(&t, t.qos()).unwrap(), r2.create_reader(&t, t.qos()).unwrap()];
    std::thread::scope(|s| {
        for (i, w) in [&w1, &w2].into_iter().enumerate() {
            s.spawn(move || {
                let t = w.find_topic::<(u32, u64)>("t").unwrap();
                let writer = w.create_writer(&t, t.qos()).unwrap();
                for n in 0..300u64 {
                    writer.write(&(i as u32, n)).unwrap();
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
    drop((r1, r2, w1, w2));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(view_ids(&ps), before, "clients came and went with no view change");
}

#[test]
fn a_client_moves_when_its_member_fails_with_no_gap_and_no_duplicate() {
    let ps = domain(&format!("dc{}f", std::process::id()));
    let qos = Qos { level: Level::Volatile, history: History::KeepAll, ..Qos::default() }.max_sample_bytes(64);
    let topic = ps[0].topic::<(u32, u64)>("t", qos).unwrap();
    let mut member_readers = Vec::new();
    for p in &ps {
        let t = p.find_topic::<(u32, u64)>("t").unwrap();
        member_readers.push(p.create_reader(&t, t.qos()).unwrap());
        p.serve_clients(&t).unwrap();
    }
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
    assert_eq!(writer_client.failovers(), 1);
    eprintln!("resent after the move: {}", w.resent());
    let got = r.take_n(total as usize, WAIT);
    let ns: Vec<u64> = got.iter().map(|s| s.data.1).collect();
    assert_eq!(ns, (0..total).collect::<Vec<_>>(), "the client reader: no gap, no duplicate");
    assert_eq!(reader_client.failovers(), 1);
    assert_eq!(r.status().lost, 0);
    let topic_seqs: Vec<u64> = got.iter().map(|s| s.info.topic_seq).collect();
    assert_eq!(topic_seqs, (0..total).collect::<Vec<_>>());
    for (i, mr) in member_readers.iter().enumerate().filter(|(i, _)| *i != 1) {
        let got = mr.take_n(total as usize, WAIT);
        let ns: Vec<u64> = got.iter().map(|s| s.data.1).collect();
        assert_eq!(ns, (0..total).collect::<Vec<_>>(), "member {i}: each written sample once");
    }
}
