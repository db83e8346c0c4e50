//! A shard's records over a real replicated log and fjall stores (members as
//! threads of this process over shm): client writes deduplicated by request, a
//! pull whose copies never overwrite the writes made while it is open, its end
//! and the drop of a range that moved away; the rules' state kept through a
//! store reopened on its directory, and carried by a checkpoint to a member
//! that joins after a trim.

mod common;

use common::{contents, log_over, synced, three_logs, Kv};
use spindle_kv::shard::{key_hash, Range};
use spindle_kv::{Store, Update, Writer};
use spindle_views::config::Transport;
use std::collections::BTreeMap;

fn by(client: u64, seq: u64) -> Writer {
    Writer { client, seq }
}

fn pairs(items: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
    items.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())).collect()
}

#[test]
fn a_shards_records_apply_alike_everywhere_and_survive_a_reopen() {
    let name = format!("kvs{}", std::process::id());
    let dirs = testkit::TempDirs::new(&name, 3);
    let logs = three_logs(&name, &dirs, Transport::Shm);
    let mut stores: Vec<Kv> = (0..3).map(|i| Store::open(&dirs[i].join("store"), logs[i].clone()).unwrap()).collect();
    let s = &stores[0];

    // A request asked again (a retry after a lost answer) is applied once.
    s.write(b"colour", Some(b"blue"), by(7, 1)).unwrap();
    s.write(b"colour", Some(b"green"), by(8, 1)).unwrap();
    s.write(b"colour", Some(b"blue"), by(7, 1)).unwrap();
    assert_eq!(s.get(b"colour").unwrap().as_deref(), Some(&b"green"[..]));

    // A pull opens: its first record brings the old owner's writers, so a retry
    // of a request the old owner applied changes nothing here either.
    s.record(Update::BeginPull { migration: 1, range: Range::ALL, writers: vec![by(9, 4)] }).unwrap();
    synced(s);
    assert!(s.pull_begun(1));
    s.write(b"shape", Some(b"square"), by(9, 4)).unwrap();
    assert_eq!(s.get(b"shape").unwrap(), None, "request (9, 4) was applied by the old owner");
    // A write while the pull is open claims its key; the pulled copy loses.
    s.write(b"size", Some(b"large"), by(8, 2)).unwrap();
    synced(s);
    assert!(s.claimed(b"size"));
    s.record(Update::Pulled { migration: 1, pairs: pairs(&[("size", "small"), ("taste", "sweet")]) }).unwrap();
    assert_eq!(s.get(b"size").unwrap().as_deref(), Some(&b"large"[..]));
    assert_eq!(s.get(b"taste").unwrap().as_deref(), Some(&b"sweet"[..]));
    s.record(Update::EndPull { migration: 1 }).unwrap();
    synced(s);
    assert!(s.pulls().is_empty() && !s.claimed(b"size"));
    // A copy that lags behind the end of its pull changes nothing.
    s.record(Update::Pulled { migration: 1, pairs: pairs(&[("taste", "sour")]) }).unwrap();
    assert_eq!(s.get(b"taste").unwrap().as_deref(), Some(&b"sweet"[..]));

    // A batch for a migration: the keys of one range, in key order.
    let h = key_hash(b"taste");
    let (batch, more) = s.batch_of(Range::one(h), None, 10, u32::MAX).unwrap();
    assert_eq!(batch, pairs(&[("taste", "sweet")]));
    assert!(!more);
    let (all, more) = s.batch_of(Range::ALL, None, 2, u32::MAX).unwrap();
    assert_eq!((all.len(), more), (2, true));
    let (rest, more) = s.batch_of(Range::ALL, Some(&all[1].0), 10, u32::MAX).unwrap();
    assert_eq!((rest.len(), more), (1, false));

    // The range moves away (migration 2, after the pull of 1): its keys go.
    s.record(Update::DropRange { migration: 2, range: Range::one(h) }).unwrap();
    let want: BTreeMap<Vec<u8>, Vec<u8>> = pairs(&[("colour", "green"), ("size", "large")]).into_iter().collect();
    for st in &stores {
        assert_eq!(contents(st), want, "every member applies the records alike");
        assert_eq!(st.writers(), vec![by(7, 1), by(8, 2), by(9, 4)]);
    }

    // Reopened on its directory, a store keeps the rules' state.
    let s2 = stores.pop().unwrap();
    drop(s2);
    let s2 = Store::open(&dirs[2].join("store"), logs[2].clone()).unwrap();
    assert_eq!(s2.writers(), vec![by(7, 1), by(8, 2), by(9, 4)]);
    stores[0].write(b"colour", Some(b"blue"), by(7, 1)).unwrap();
    assert_eq!(contents(&s2), want, "the retry is still recognised after the reopen");
    drop(s2);
    drop(stores);
    drop(logs);
}

#[test]
fn a_checkpoint_carries_the_table_of_writers_to_a_member_that_joins_after_a_trim() {
    let name = format!("kvw{}", std::process::id());
    let dirs = testkit::TempDirs::new(&name, 4);
    let logs = three_logs(&name, &dirs, Transport::Shm);
    let stores: Vec<Kv> = (0..3).map(|i| Store::open(&dirs[i].join("store"), logs[i].clone()).unwrap()).collect();
    // Enough to fill several of the log's 64 KiB segments, so the trim drops some.
    let v = vec![b'v'; 1000];
    for i in 0..300u64 {
        stores[0].write(format!("k{i}").as_bytes(), Some(&v), by(i % 5, i / 5 + 1)).unwrap();
    }
    for s in &stores {
        synced(s);
        s.snapshot().unwrap();
    }
    for s in &stores {
        synced(s);
    }
    let point = stores[0].trim_log().unwrap().expect("every member took a snapshot");
    assert!(point.0 > 0);
    let l3 = log_over(&name, 3, Some(logs[0].group().listen_addr()), &dirs[3], Transport::Shm);
    let s3: Kv = Store::open(&dirs[3].join("store"), l3.clone()).unwrap();
    synced(&s3);
    assert_eq!(s3.writers(), stores[0].writers(), "the checkpoint brought the writers");
    // A retry of an old request is recognised at the joiner too.
    stores[0].write(b"k0", Some(b"again"), by(0, 1)).unwrap();
    assert_eq!(s3.get(b"k0").unwrap(), Some(v));
    assert_eq!(contents(&s3), contents(&stores[0]));
    drop(s3);
    drop(l3);
    drop(stores);
    drop(logs);
}
