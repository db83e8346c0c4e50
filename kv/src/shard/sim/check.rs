//! A linearizability check of one key's history, as a register (the search of
//! Wing and Gong, with Lowe's memo of states already tried).

use super::{Kind, OpRecord};
use std::collections::{HashMap, HashSet};

/// Whether the requests on one key (`ops`, every one on the same key) can be
/// put in one order that respects their start and answer steps and in which
/// every get returns the value of the write before it (`None` before any).
/// Requests never answered may take effect at any point after they start, or
/// never. Returns the requests left unplaced when it cannot.
pub fn linearizable(ops: &[&OpRecord]) -> Result<(), String> {
    let mut ids: HashMap<Option<Vec<u8>>, u32> = HashMap::new();
    ids.insert(None, 0);
    let mut id = |v: &Option<Vec<u8>>| {
        let n = ids.len() as u32;
        *ids.entry(v.clone()).or_insert(n)
    };
    // (invoke, response or MAX, write value id or read value id, is_write)
    let ops: Vec<(u64, u64, u32, bool)> = ops
        .iter()
        .filter(|o| o.kind != Kind::Read || o.response.is_some())
        .map(|o| match &o.kind {
            Kind::Write(v) => (o.invoke, o.response.unwrap_or(u64::MAX), id(v), true),
            Kind::Read => (o.invoke, o.response.unwrap_or(u64::MAX), id(o.result.as_ref().expect("answered")), false),
        })
        .collect();
    let words = ops.len().div_ceil(64);
    let has = |set: &[u64], i: usize| set[i / 64] >> (i % 64) & 1 == 1;
    let with = |set: &[u64], i: usize| {
        let mut s = set.to_vec();
        s[i / 64] |= 1 << (i % 64);
        s
    };
    let required = ops.iter().filter(|o| o.1 != u64::MAX).count();
    let placed_required = |set: &[u64]| (0..ops.len()).filter(|i| ops[*i].1 != u64::MAX && has(set, *i)).count();
    let mut seen: HashSet<(Vec<u64>, u32)> = HashSet::new();
    let mut stack = vec![(vec![0u64; words], 0u32)];
    let mut best = vec![0u64; words];
    let count = |set: &[u64]| set.iter().map(|w| w.count_ones()).sum::<u32>();
    while let Some((done, value)) = stack.pop() {
        if placed_required(&done) == required {
            return Ok(());
        }
        if count(&done) > count(&best) {
            best = done.clone();
        }
        if !seen.insert((done.clone(), value)) {
            continue;
        }
        // The earliest answer among the requests not placed: none that started
        // after it may come first.
        let horizon = (0..ops.len()).filter(|i| !has(&done, *i)).map(|i| ops[i].1).min();
        let Some(horizon) = horizon else { continue };
        for (i, &(inv, _, v, write)) in ops.iter().enumerate() {
            if has(&done, i) || inv > horizon {
                continue;
            }
            if write {
                stack.push((with(&done, i), v));
            } else if v == value {
                stack.push((with(&done, i), value));
            }
        }
    }
    let left: Vec<usize> = (0..ops.len()).filter(|i| !has(&best, *i)).collect();
    Err(format!("no order fits; at best, requests {left:?} (of this key's) could not be placed"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(kind: Kind, result: Option<&str>, invoke: u64, response: u64) -> OpRecord {
        OpRecord {
            client: 0,
            key: 0,
            kind,
            result: Some(result.map(|r| r.as_bytes().to_vec())),
            invoke,
            response: Some(response),
            served: None,
        }
    }

    fn w(v: &str, a: u64, b: u64) -> OpRecord {
        op(Kind::Write(Some(v.as_bytes().to_vec())), None, a, b)
    }

    #[test]
    fn stale_reads_are_caught_and_concurrent_ones_allowed() {
        let (w1, w2) = (w("a", 1, 2), w("b", 3, 4));
        let fresh = op(Kind::Read, Some("b"), 5, 6);
        assert!(linearizable(&[&w1, &w2, &fresh]).is_ok());
        let stale = op(Kind::Read, Some("a"), 5, 6);
        assert!(linearizable(&[&w1, &w2, &stale]).is_err(), "a read after b's answer returned a");
        let overlapping = op(Kind::Read, Some("a"), 3, 6);
        assert!(linearizable(&[&w1, &w2, &overlapping]).is_ok(), "it overlaps the write of b");
        let nothing = op(Kind::Read, None, 5, 6);
        assert!(linearizable(&[&w1, &nothing]).is_err(), "a lost write");
        // a, then b, then a again needs a second write of a.
        let (r1, r2, r3) =
            (op(Kind::Read, Some("a"), 2, 3), op(Kind::Read, Some("b"), 5, 6), op(Kind::Read, Some("a"), 7, 8));
        let long_a = w("a", 1, 9);
        assert!(linearizable(&[&long_a, &w("b", 4, 5), &r1, &r2, &r3]).is_err());
    }
}
