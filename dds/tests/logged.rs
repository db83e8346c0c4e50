//! The Logged level: a participant that restarts recovers its log; a late joiner
//! catches up from the others' logs; a torn tail is cut and never replayed; a
//! corrupted log is a clear error. Participants are threads of one process over
//! shm; a "restart" drops a participant and starts a new one with the same node id
//! and log directory. Every wait has a deadline.

use spindle_dds::log::Fsync;
use spindle_dds::DdsConfig;
use spindle_dds::{DdsError, DomainParticipant};
use spindle_dds::{History, Qos};
use spindle_views::config::{Config, Transport};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn participant(domain: &str, id: u32, contact: Option<SocketAddr>, dir: &Path) -> Result<DomainParticipant, DdsError> {
    let mut b = Config::builder(id, testkit::free_control_addr())
        .name(domain)
        .transport(Transport::Shm)
        .timeouts(Duration::from_millis(50), Duration::from_millis(500));
    if let Some(c) = contact {
        b = b.contact(c);
    }
    let mut cfg = DdsConfig::new(b.build().unwrap());
    cfg.log_dir = dir.to_path_buf();
    cfg.fsync = Fsync::Never;
    DomainParticipant::new(cfg)
}

/// A directory removed when the test ends, passed or not.
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::ops::Deref for Dir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

fn fresh_dir(tag: &str) -> Dir {
    let d = std::env::temp_dir().join(format!("dds-logged-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    Dir(d)
}

/// The one log file of node `node` under `dir`.
fn log_of(dir: &Path, node: u32) -> PathBuf {
    let mut found = Vec::new();
    for domain in std::fs::read_dir(dir).unwrap() {
        for f in std::fs::read_dir(domain.unwrap().path()).unwrap() {
            let p = f.unwrap().path();
            if p.to_string_lossy().ends_with(&format!(".{node}.log")) {
                found.push(p);
            }
        }
    }
    assert_eq!(found.len(), 1, "{found:?}");
    found.pop().unwrap()
}

fn qos() -> Qos {
    Qos::logged(History::KeepAll)
}

#[test]
fn a_restarted_participant_recovers_its_log_and_a_late_joiner_catches_up_from_it() {
    let dir = fresh_dir("restart");
    let domain = format!("ddsl{}", std::process::id());
    {
        let p = participant(&domain, 0, None, &dir).unwrap();
        let t = p.topic::<String>("events", qos()).unwrap();
        let w = p.create_writer(&t, t.qos()).unwrap();
        for i in 0..200 {
            w.write(&format!("event {i}")).unwrap();
        }
        assert!(w.wait_for_delivery(WAIT));
    } // the process "stops"
      // A torn append at the end, as a crash inside a write leaves it.
    let path = log_of(&dir, 0);
    let whole = std::fs::metadata(&path).unwrap().len();
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"SPLG\x40\x00\x00\x00half a record").unwrap();
    }
    let p = participant(&domain, 0, None, &dir).unwrap();
    let t = p.topic::<String>("events", qos()).unwrap();
    let r = p.create_reader(&t, t.qos()).unwrap();
    let got = r.take();
    assert_eq!(got.len(), 200, "every sample written before the restart, and nothing torn");
    assert!(got.iter().enumerate().all(|(i, s)| s.data == format!("event {i}") && s.info.topic_seq == i as u64));
    assert!(got.iter().all(|s| s.info.from_history));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), whole, "the torn tail was cut");

    // A second participant joins the domain and the topic: it catches up from node
    // 0's log, then goes live; its own log holds everything.
    let q = participant(&domain, 1, Some(p.group().listen_addr()), &dir).unwrap();
    let tq = q.find_topic::<String>("events").unwrap();
    let late = q.create_reader(&tq, tq.qos()).unwrap();
    let w = p.create_writer(&t, t.qos()).unwrap();
    for i in 200..250 {
        w.write(&format!("event {i}")).unwrap();
    }
    let all = late.take_n(250, WAIT);
    assert_eq!(all.len(), 250, "{:?}", late.status());
    let bad: Vec<_> = all
        .iter()
        .enumerate()
        .filter(|(i, s)| !(s.data == format!("event {i}") && s.info.topic_seq == *i as u64))
        .map(|(i, s)| (i, s.data.clone(), s.info.topic_seq, s.info.valid_data))
        .take(5)
        .collect();
    assert!(bad.is_empty(), "{bad:?}");
    assert!(all[199].info.from_history && !all[249].info.from_history);
    assert_eq!(r.take_n(50, WAIT).len(), 50);
    assert!(w.wait_for_delivery(WAIT));
    drop((w, r, late));
    drop((p, q));
    let (_, records) = spindle_dds::log::SampleLog::open(log_of(&dir, 1), Fsync::Never).unwrap();
    assert_eq!(records.len(), 250, "the late joiner's log holds the history and the live samples");
}

#[test]
fn a_corrupted_log_is_a_clear_error() {
    let dir = fresh_dir("corrupt");
    let domain = format!("ddsc{}", std::process::id());
    {
        let p = participant(&domain, 0, None, &dir).unwrap();
        let t = p.topic::<u64>("c", qos()).unwrap();
        let w = p.create_writer(&t, t.qos()).unwrap();
        for i in 0..20 {
            w.write(&i).unwrap();
        }
        assert!(w.wait_for_delivery(WAIT));
    }
    let path = log_of(&dir, 0);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100] ^= 0x40; // inside an early record, with good records after it
    std::fs::write(&path, &bytes).unwrap();
    let p = participant(&domain, 0, None, &dir).unwrap();
    let t = p.topic::<u64>("c", qos()).unwrap();
    let e = p.create_reader(&t, t.qos()).unwrap_err();
    assert!(matches!(e, DdsError::Log(spindle_dds::log::LogError::Corrupt { .. })), "{e}");
    assert!(e.to_string().contains("corrupt"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "the damaged file is left as it was");
    // Other topics of the participant still work.
    let ok = p.topic::<u64>("other", Qos::ordered()).unwrap();
    let r = p.create_reader(&ok, ok.qos()).unwrap();
    let w = p.create_writer(&ok, ok.qos()).unwrap();
    w.write(&7).unwrap();
    assert_eq!(r.take_n(1, WAIT)[0].data, 7);
    drop((r, w, p));
}
