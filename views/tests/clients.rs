//! Clients outside the view (`spindle_views::client`): three members as threads of this
//! process over shm or tcp, clients connected to them over their control ports.
//! Every wait has a deadline; shm files are removed by the transports.

use spindle_views::client::{Client, ClientError, Relayed};
use spindle_views::config::{Config, Transport};
use spindle_views::group::{ClientLimits, Group, GroupBuilder};
use spindle_views::wire::{encode, read_frame, Message};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

type Log = Arc<Mutex<Vec<(u32, Vec<u8>)>>>;

mod common;

fn config(name: &str, id: u32, contact: Option<SocketAddr>, t: Transport) -> Config {
    let b = common::member_config(name, id, contact, t).window(16).max_msg(256);
    b.timeouts(Duration::from_millis(50), Duration::from_millis(1000)).build().unwrap()
}

/// Three members delivering subgroup 0 into logs; member 0 answers requests.
fn group(name: &str, t: Transport, limits: ClientLimits) -> Vec<(Group, Log)> {
    let mut out: Vec<(Group, Log)> = Vec::new();
    for id in 0..3u32 {
        let contact = out.first().map(|(g, _)| g.listen_addr());
        let log: Log = Arc::default();
        let l = log.clone();
        let g = GroupBuilder::new(config(name, id, contact, t))
            .on_deliver(0, move |d| l.lock().unwrap().push((d.sender.0, d.data.to_vec())))
            .on_request(move |body| [b"member ".as_slice(), id.to_string().as_bytes(), b": ", body].concat())
            .client_limits(limits)
            .start()
            .unwrap();
        out.push((g, log));
    }
    for (g, _) in &out {
        assert!(g.wait_for_members(3, WAIT), "the group formed");
    }
    let deadline = Instant::now() + WAIT;
    while views(&out).windows(2).any(|w| w[0] != w[1]) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    out
}

/// Each member's current view. (The view id, not `Metrics::views_installed`: a
/// member's counter moves just after its view does.)
fn views(members: &[(Group, Log)]) -> Vec<Option<spindle_views::view::ViewId>> {
    members.iter().map(|(g, _)| g.view().map(|v| v.id())).collect()
}

/// Waits until every member delivered `n` messages (a member relays a batch just
/// before its callback takes it).
fn wait_for_logs(members: &[(Group, Log)], n: usize) {
    let deadline = Instant::now() + WAIT;
    while members.iter().any(|(_, l)| l.lock().unwrap().len() < n) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Receives until `n` messages came, or until none came for the wait (a busy machine
/// slows the stream, it does not end it).
fn receive(c: &mut Client, n: usize) -> Vec<Relayed> {
    receive_counted(c, n, &Mutex::new(0))
}

/// [`receive`], publishing how many came so far in `count`.
fn receive_counted(c: &mut Client, n: usize, count: &Mutex<usize>) -> Vec<Relayed> {
    let mut deadline = Instant::now() + WAIT;
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        if let Some(m) = c.recv(Duration::from_millis(100)).expect("the session lasts") {
            got.push(m);
            *count.lock().unwrap() = got.len();
            deadline = Instant::now() + WAIT;
        }
    }
    got
}

fn relayed_in_order(t: Transport, name: &str) {
    let members = group(name, t, ClientLimits::default());
    let views_before = views(&members);
    let view = members[0].0.view().unwrap().id();
    let addrs: Vec<SocketAddr> = members.iter().map(|(g, _)| g.listen_addr()).collect();
    // Two clients at different members; the first contact of the second is dead, so
    // it moves on to the next one.
    let mut a = Client::connect(&addrs[1..2], WAIT).unwrap();
    let dead = testkit::free_control_addr();
    let mut b = Client::connect(&[dead, addrs[2]], WAIT).unwrap();
    assert_eq!(a.member().0 .0, 1);
    assert_eq!(b.member(), (spindle_sst::transport::NodeId(2), addrs[2]));
    a.subscribe(0).unwrap();
    b.subscribe(0).unwrap();
    // A request round trip also proves each subscription is in place (the member
    // reads the session's frames in order).
    assert_eq!(a.request(b"hi", WAIT).unwrap(), b"member 1: hi");
    assert_eq!(b.request(b"ho", WAIT).unwrap(), b"member 2: ho");
    // Every member sends; clients see what members deliver, in the same order.
    const N: usize = 200;
    std::thread::scope(|s| {
        for (g, _) in &members {
            s.spawn(move || {
                for i in 0..N {
                    g.send(0, format!("{}:{i}", g.listen_addr()).as_bytes()).unwrap();
                }
            });
        }
    });
    let (ga, gb) = (receive(&mut a, 3 * N), receive(&mut b, 3 * N));
    wait_for_logs(&members, 3 * N);
    let member_log = members[1].1.lock().unwrap().clone();
    let as_log = |got: &[Relayed]| got.iter().map(|m| (m.sender.0, m.data.clone())).collect::<Vec<_>>();
    assert_eq!(ga.len(), 3 * N, "client a got every message");
    assert_eq!(as_log(&ga), member_log, "client a sees its member's delivery order");
    assert_eq!(as_log(&gb), member_log, "client b sees the same order at another member");
    for (i, m) in ga.iter().enumerate() {
        assert_eq!((m.view, m.subgroup, m.index), (view, 0, i as u64), "positions count the view's deliveries");
    }
    assert_eq!(ga, gb, "the same positions at both members");
    // Clients leaving (and one dying mid-session) change no view.
    drop(a);
    drop(b);
    let c = Client::connect(&addrs, WAIT).unwrap();
    c.subscribe(0).unwrap();
    drop(c);
    assert!(members[0].0.wait_for_members(3, WAIT));
    assert_eq!(views(&members), views_before, "no view change for clients");
    assert_eq!(views_before, vec![Some(view); 3]);
}

#[test]
fn clients_see_every_delivery_in_order_and_change_no_view_over_shm() {
    relayed_in_order(Transport::Shm, &format!("cl{}s", std::process::id()));
}

#[test]
fn clients_see_every_delivery_in_order_and_change_no_view_over_tcp() {
    relayed_in_order(Transport::Tcp, &format!("cl{}t", std::process::id()));
}

/// Reads frames from a raw session until one matches `want` (bounded).
fn read_until(s: &mut TcpStream, want: impl Fn(&Message) -> bool) -> Option<Message> {
    s.set_read_timeout(Some(WAIT)).unwrap();
    loop {
        match read_frame(s) {
            Ok(m) if want(&m) => return Some(m),
            Ok(_) => continue,
            Err(_) => return None,
        }
    }
}

#[test]
fn a_client_that_stops_reading_is_dropped_and_the_group_goes_on() {
    // The buffer limit is what drops the stalled client here: a write timeout far
    // longer than the run, so that on a loaded machine, where the sender runs
    // slowly, the connection's blocked writer does not close the session first.
    let limits =
        ClientLimits { buffer_bytes: 4 << 20, write_timeout: Duration::from_secs(120), ..ClientLimits::default() };
    let members = group(&format!("cl{}d", std::process::id()), Transport::Shm, limits);
    let views_before = views(&members);
    let addr = members[1].0.listen_addr();
    // A raw client that subscribes and then reads nothing.
    let mut slow = TcpStream::connect(addr).unwrap();
    slow.write_all(&encode(&Message::ClientHello { resume: None }).unwrap()).unwrap();
    assert!(matches!(read_frame(&mut slow), Ok(Message::ClientWelcome { node: 1, .. })));
    slow.write_all(&encode(&Message::Subscribe { subgroup: 0 }).unwrap()).unwrap();
    // A well-behaved client at the same member.
    let mut good = Client::connect(&[addr], WAIT).unwrap();
    good.subscribe(0).unwrap();
    good.request(b"sync", WAIT).unwrap();
    // Far more than the socket buffers (some MB on loopback) and the 4 MB limit hold.
    // The sender waits for the reading client, so it is never more than ~1 MB behind
    // however slowly the machine runs it; the stalled client is behind by all of it.
    const N: usize = 100_000;
    const AHEAD: usize = 4_000;
    let writer = &members[0].0;
    let payload = [7u8; 240];
    let count = Mutex::new(0usize);
    let got = std::thread::scope(|s| {
        let reader = s.spawn(|| receive_counted(&mut good, N, &count));
        for i in 0..N {
            while i >= *count.lock().unwrap() + AHEAD && !reader.is_finished() {
                std::thread::sleep(Duration::from_millis(1));
            }
            writer.send(0, &payload).unwrap();
        }
        reader.join().unwrap()
    });
    assert_eq!(got.len(), N, "the reading client got everything");
    let deadline = Instant::now() + WAIT;
    while members[1].0.metrics().clients_dropped == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(members[1].0.metrics().clients_dropped, 1, "the stalled client was dropped (and only it)");
    wait_for_logs(&members, N);
    assert!(members.iter().all(|(_, log)| log.lock().unwrap().len() == N), "every member delivered everything");
    // The stalled client, reading again, finds out why (after what was in flight).
    // (None: the connection closed first; the client sees the end of the stream.)
    if let Some(Message::ClientDropped { reason }) =
        read_until(&mut slow, |m| matches!(m, Message::ClientDropped { .. }))
    {
        assert!(reason.contains("fell behind"), "{reason}");
    }
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    // The member keeps serving others.
    let again = Client::connect(&[addr], WAIT).unwrap();
    assert_eq!(again.request(b"still there?", WAIT).unwrap(), b"member 1: still there?");
    assert_eq!(views(&members), views_before, "no view change for clients");
}

#[test]
fn hostile_client_frames_are_refused_and_the_members_go_on() {
    let limits = ClientLimits { max_clients: 2, ..ClientLimits::default() };
    let members = group(&format!("cl{}h", std::process::id()), Transport::Shm, limits);
    let views_before = views(&members);
    let addr = members[0].0.listen_addr();
    // Closed: end of stream, or a reset (the member closed with our bytes unread).
    let closed = |mut s: TcpStream| {
        s.set_read_timeout(Some(WAIT)).unwrap();
        let mut buf = Vec::new();
        match s.read_to_end(&mut buf) {
            Ok(_) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    };
    // Garbage, a huge length, a subscription before the hello.
    for bytes in [
        vec![0xAB; 64],
        [b"SPCP".as_slice(), &spindle_views::wire::VERSION.to_le_bytes(), &u32::MAX.to_le_bytes()].concat(),
        encode(&Message::Subscribe { subgroup: 0 }).unwrap(),
    ] {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&bytes).unwrap();
        assert!(closed(s), "the member closes the connection");
    }
    // A session that sends an out-of-range subgroup or a member-only frame is ended.
    for bad in [
        [b"SPCP".as_slice(), &spindle_views::wire::VERSION.to_le_bytes()].concat(), // cut inside a header
        encode(&Message::JoinRequest {
            member: spindle_views::wire::MemberInfo { node: 9, control: addr, data: None },
        })
        .unwrap(),
    ] {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&encode(&Message::ClientHello { resume: None }).unwrap()).unwrap();
        assert!(matches!(read_frame(&mut s), Ok(Message::ClientWelcome { .. })));
        s.write_all(&bad).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let ended = read_until(&mut s, |m| matches!(m, Message::ClientDropped { .. }));
        assert!(matches!(ended, Some(Message::ClientDropped { .. })), "the member says why it ends the session");
    }
    let mut raw = [b"SPCP".as_slice(), &spindle_views::wire::VERSION.to_le_bytes()].concat();
    let body = [10u8, 0xff, 0xff, 0xff, 0x0f]; // the Subscribe tag, then a subgroup of u32::MAX
    raw.extend_from_slice(&(body.len() as u32).to_le_bytes());
    raw.extend_from_slice(&body);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&encode(&Message::ClientHello { resume: None }).unwrap()).unwrap();
    assert!(matches!(read_frame(&mut s), Ok(Message::ClientWelcome { .. })));
    s.write_all(&raw).unwrap();
    assert!(matches!(read_until(&mut s, |_| true), Some(Message::ClientDropped { .. })), "an invalid subgroup ends it");
    // A stranger naming a connected client's session (without its token, which
    // only that client holds), and one client past the limit, are refused.
    let a = Client::connect(&[addr], WAIT).unwrap();
    for member in [addr, members[0].0.listen_addr()] {
        let mut dup = TcpStream::connect(member).unwrap();
        dup.write_all(&encode(&Message::ClientHello { resume: Some((a.id(), [0; 16])) }).unwrap()).unwrap();
        let refused = read_frame(&mut dup);
        assert!(
            matches!(&refused, Ok(Message::JoinRefused { reason }) if reason.contains("token does not hold")),
            "{refused:?}"
        );
    }
    // The sessions ended above count against the limit until their threads have
    // closed them, which a loaded machine may not have done yet.
    let deadline = Instant::now() + WAIT;
    while members[0].0.metrics().clients != 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(members[0].0.metrics().clients, 1, "only the one connected client is left");
    let b = Client::connect(&[addr], WAIT).unwrap();
    let deadline = Instant::now() + WAIT;
    while members[0].0.metrics().clients != 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    match Client::connect(&[addr], WAIT) {
        Err(ClientError::Connect(why)) => assert!(why.contains("its limit"), "{why}"),
        other => panic!("a third client must be refused: {other:?}"),
    }
    drop((a, b));
    // The members go on: a message is delivered everywhere, and no view changed.
    members[2].0.send(0, b"after").unwrap();
    let deadline = Instant::now() + WAIT;
    while members.iter().any(|(_, l)| l.lock().unwrap().is_empty()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(members.iter().all(|(_, l)| l.lock().unwrap().as_slice() == [(2, b"after".to_vec())]));
    assert_eq!(views(&members), views_before, "no view change for clients");
}

/// An application protocol over client sessions: each post is pushed back to every
/// session that posted (reversed), requests answer with the session's id, and the
/// handler hears of the end of each session.
struct Echo {
    seen: Mutex<Vec<spindle_views::group::ClientSession>>,
    closed: Arc<Mutex<Vec<u64>>>,
}

impl spindle_views::group::ClientHandler for Echo {
    fn request(&self, s: &spindle_views::group::ClientSession, body: &[u8]) -> Vec<u8> {
        [&s.id().to_le_bytes()[..], body].concat()
    }
    fn post(&self, s: &spindle_views::group::ClientSession, body: &[u8]) {
        let mut seen = self.seen.lock().unwrap();
        if !seen.iter().any(|x| x.id() == s.id()) {
            seen.push(s.clone());
        }
        let back: Vec<u8> = body.iter().rev().copied().collect();
        seen.retain(|x| x.push(&back));
    }
    fn closed(&self, s: &spindle_views::group::ClientSession) {
        self.closed.lock().unwrap().push(s.id());
    }
}

#[test]
fn a_client_handler_serves_posts_requests_and_pushes() {
    let closed: Arc<Mutex<Vec<u64>>> = Arc::default();
    let handler = Echo { seen: Mutex::default(), closed: closed.clone() };
    let cfg = config(&format!("cl{}p", std::process::id()), 0, None, Transport::Tcp);
    let g = GroupBuilder::new(cfg).client_handler(handler).start().unwrap();
    assert!(g.wait_for_members(1, WAIT));
    let c = Arc::new(Client::connect(&[g.listen_addr()], WAIT).unwrap());
    // One thread receives while this one posts and requests.
    let receiver = {
        let c = c.clone();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            let deadline = Instant::now() + WAIT;
            while got.len() < 100 && Instant::now() < deadline {
                if let Some(spindle_views::client::Event::Push(b)) = c.recv_event(Duration::from_millis(100)).unwrap() {
                    got.push(b);
                }
            }
            got
        })
    };
    for i in 0..100u32 {
        c.post(&i.to_be_bytes()).unwrap();
        if i % 10 == 0 {
            let reply = c.request(b"who", WAIT).unwrap();
            assert_eq!(reply, [&c.id().to_le_bytes()[..], b"who"].concat());
        }
    }
    let got = receiver.join().unwrap();
    let want: Vec<Vec<u8>> = (0..100u32).map(|i| i.to_le_bytes().to_vec()).collect();
    assert_eq!(got, want, "every push, in order (a big-endian number reversed is little-endian)");
    let id = c.id();
    drop(c);
    let deadline = Instant::now() + WAIT;
    while !closed.lock().unwrap().contains(&id) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(*closed.lock().unwrap(), vec![id], "the handler heard the session end");
    drop(g);
}
