//! `tailwind_dump` on segment files made here: a good segment with plain and
//! tagged records, a trim floor, then a damaged segment (exit status 1, named).

use spindle_tailwind::format::{Appender, BufLen, Tag};
use std::process::Command;

fn segment(records: &[(&[u8], Option<Tag>)]) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    let mut a = Appender::new(BufLen(buf.len()));
    for (r, t) in records {
        a.append_tagged(&mut buf, r, *t).unwrap();
    }
    buf.truncate(a.end().0);
    buf
}

fn dump(dir: &std::path::Path, extra: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tailwind_dump")).arg(dir).args(extra).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn tailwind_dump_verifies_and_names_a_damaged_segment() {
    let dir = std::env::temp_dir().join(format!("tw-dump-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let tag = Tag { producer: 7, seq: 41 };
    std::fs::write(dir.join("log3-seg10.tw"), segment(&[(b"first", None), (b"second", Some(tag))])).unwrap();
    std::fs::write(dir.join("log3-seg12.tw"), segment(&[(&[0, 1, 2, 255], None)])).unwrap();
    std::fs::write(dir.join("log3-trim"), 10u64.to_le_bytes()).unwrap();
    let (ok, out) = dump(&dir, &["--records"]);
    assert!(ok, "{out}");
    assert!(out.contains("log 3 segment 10: records 10..12 (2 records, 1 tagged)"), "{out}");
    assert!(out.contains("verifies") && !out.contains("DAMAGED"), "{out}");
    assert!(out.contains("10: 5 bytes \"first\""), "{out}");
    assert!(out.contains("11: 6 bytes tag 7/41 \"second\""), "{out}");
    assert!(out.contains("12: 4 bytes 000102ff"), "{out}");
    assert!(out.contains("log 3: trimmed before record 10"), "{out}");
    // A gap, then a flipped bit in a record of another segment.
    let mut bad = segment(&[(b"a", None), (b"b", None)]);
    bad[16] ^= 1; // the first record's data byte
    std::fs::write(dir.join("log3-seg20.tw"), bad).unwrap();
    let (ok, out) = dump(&dir, &[]);
    assert!(!ok, "a damaged segment fails the run: {out}");
    assert!(out.contains("records 13..20 are in no file here"), "{out}");
    assert!(
        out.contains("log 3 segment 20: records 20..20 (0 records, 0 tagged), 64 bytes: DAMAGED at byte 0"),
        "{out}"
    );
    // Another log's files only: none here.
    let (ok, out) = dump(&dir, &["--log", "4"]);
    assert!(ok && out.contains("no segment files"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
