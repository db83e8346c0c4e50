//! Messages of 1 MiB and 16 MiB through a Group over shm and tcp (members as threads
//! of this process, loopback only): in one total order with small ones at every
//! member, whole, copied out or read in place; and a view change while they flow,
//! after which every message is delivered exactly once, in order, whole. Every wait
//! has a deadline; shm files are removed by the transports.

use spindle_views::config::Transport;
use spindle_views::group::{Group, GroupBuilder};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

const WAIT: Duration = Duration::from_secs(90);
const MIB: usize = 1 << 20;

/// (sender, its message number, length, whole?) per delivery.
type Log = Arc<Mutex<Vec<(u32, u32, usize, bool)>>>;

/// Message `i` of `sender`: its name first and last, a pattern that depends on both
/// between, so a message delivered before all of it arrived is not whole.
fn payload(sender: u32, i: u32, len: usize) -> Vec<u8> {
    let name = (u64::from(sender) << 32) | u64::from(i);
    let mut v: Vec<u8> = (0..len).map(|j| (j as u8).wrapping_mul(7).wrapping_add(i as u8 ^ sender as u8)).collect();
    v[..8].copy_from_slice(&name.to_le_bytes());
    if len >= 16 {
        v[len - 8..].copy_from_slice(&name.to_le_bytes());
    }
    v
}

fn record(log: &Log, m: &[u8]) {
    let name = u64::from_le_bytes(m[..8].try_into().expect("8 bytes"));
    let (sender, i) = ((name >> 32) as u32, name as u32);
    let whole = m == payload(sender, i, m.len()).as_slice();
    log.lock().unwrap().push((sender, i, m.len(), whole));
}

/// Member `id`: slots of 256 bytes, a 40 MiB arena per sender; member 2 reads its
/// messages in place (out of the sender's arena on shm), the others get copies.
/// `secret`: a group secret file (over tcp, every data link is then sealed).
fn member(
    name: &str,
    id: u32,
    contact: Option<std::net::SocketAddr>,
    t: Transport,
    secret: Option<&std::path::Path>,
) -> (Group, Log) {
    let mut cfg = common::member_config(name, id, contact, t).window(16).max_msg(256).arena(40 * MIB);
    if let Some(s) = secret {
        cfg = cfg.secret_file(s);
    }
    let cfg = cfg.build().unwrap();
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let b = GroupBuilder::new(cfg);
    let b = if id == 2 {
        b.on_deliver_in_place(0, move |d| {
            let mut buf = vec![0u8; d.message.len()];
            d.message.read(&mut buf);
            record(&l, &buf);
        })
    } else {
        b.on_deliver(0, move |d| record(&l, d.data))
    };
    (b.start().unwrap(), log)
}

fn three(t: Transport, tag: &str, secret: Option<&std::path::Path>) -> Vec<(Group, Log)> {
    let name = format!("lg{tag}{}{}", std::process::id(), t as u8);
    let first = member(&name, 0, None, t, secret);
    let contact = Some(first.0.listen_addr());
    let mut all = vec![first];
    for id in 1..3 {
        all.push(member(&name, id, contact, t, secret));
    }
    assert!(all[0].0.wait_for_members(3, WAIT), "three members: {:?}", all[0].0.view());
    all
}

fn wait(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The sizes each sender sends, in order: 1 MiB and small ones, one of 16 MiB.
const SIZES: [usize; 8] = [MIB, 100, MIB, 16 * MIB, 8, MIB, 3000, MIB];

fn in_order_everywhere(t: Transport, secret: Option<&std::path::Path>) {
    let members = three(t, if secret.is_some() { "s" } else { "o" }, secret);
    std::thread::scope(|s| {
        for (id, (g, _)) in members.iter().enumerate() {
            s.spawn(move || {
                for (i, len) in SIZES.iter().enumerate() {
                    g.send(0, &payload(id as u32, i as u32, *len)).unwrap_or_else(|e| panic!("{id} sends {i}: {e}"));
                }
            });
        }
    });
    let total = 3 * SIZES.len();
    wait("every message at every member", || members.iter().all(|(_, l)| l.lock().unwrap().len() == total));
    let first = members[0].1.lock().unwrap().clone();
    for (id, (_, log)) in members.iter().enumerate() {
        let log = log.lock().unwrap();
        assert_eq!(*log, first, "member {id} delivered the same sequence");
        assert!(log.iter().all(|m| m.3), "member {id}: every message whole");
        for sender in 0..3u32 {
            let mine: Vec<(u32, usize)> = log.iter().filter(|m| m.0 == sender).map(|m| (m.1, m.2)).collect();
            let want: Vec<(u32, usize)> = SIZES.iter().enumerate().map(|(i, l)| (i as u32, *l)).collect();
            assert_eq!(mine, want, "member {id}: sender {sender}'s messages in its order");
        }
    }
    assert!(first.iter().any(|m| m.2 == 16 * MIB));
}

#[test]
fn shm_large_messages_are_in_order_and_whole_at_every_member() {
    in_order_everywhere(Transport::Shm, None);
}

#[test]
fn tcp_large_messages_are_in_order_and_whole_at_every_member() {
    in_order_everywhere(Transport::Tcp, None);
}

#[test]
fn tcp_large_messages_on_sealed_links_are_in_order_and_whole_at_every_member() {
    let dir = std::env::temp_dir().join(format!("views-large-key-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("group.key");
    spindle_views::auth::Secret::generate(&key).unwrap();
    in_order_everywhere(Transport::Tcp, Some(&key));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Member 0 sends 1 MiB messages; member 2 fails while they flow. The survivors
/// install a view of the two of them and deliver every message once, in order.
fn view_change_mid_transfer(t: Transport) {
    const N: u32 = 40;
    let members = three(t, "v", None);
    let before = members[0].0.view().expect("a view").id();
    std::thread::scope(|s| {
        let g0 = &members[0].0;
        s.spawn(move || {
            for i in 0..N {
                g0.send(0, &payload(0, i, MIB)).unwrap_or_else(|e| panic!("send {i}: {e}"));
            }
        });
        wait("the first messages at member 1", || members[1].1.lock().unwrap().len() >= 3);
        members[2].0.shutdown();
        let at_failure = members[1].1.lock().unwrap().len();
        eprintln!("member 2 failed with {at_failure} of {N} messages delivered at member 1");
    });
    wait("a view of the two survivors", || members[..2].iter().all(|(g, _)| g.members().len() == 2));
    wait("every message at both survivors", || members[..2].iter().all(|(_, l)| l.lock().unwrap().len() >= N as usize));
    std::thread::sleep(Duration::from_millis(200)); // a duplicate would show by now
    let a = members[0].1.lock().unwrap().clone();
    assert_eq!(a, *members[1].1.lock().unwrap(), "the survivors delivered the same sequence");
    let got: Vec<u32> = a.iter().map(|m| m.1).collect();
    assert_eq!(got, (0..N).collect::<Vec<_>>(), "each message once, in order, across the change");
    assert!(a.iter().all(|m| m.3 && m.2 == MIB), "every message whole");
    assert!(members[0].0.view().expect("a view").id() > before, "a view change happened");
}

#[test]
fn shm_a_view_change_mid_transfer_delivers_each_message_once() {
    view_change_mid_transfer(Transport::Shm);
}

#[test]
fn tcp_a_view_change_mid_transfer_delivers_each_message_once() {
    view_change_mid_transfer(Transport::Tcp);
}
