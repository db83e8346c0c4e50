//! The store's log records: updates, snapshot markers, and the records a shard
//! writes while a key range moves to it or away from it ([`crate::shard`]).

use crate::shard::Range;
use crate::Pair;

/// A log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// Sets `key` to `value`.
    Put(Vec<u8>, Vec<u8>),
    /// Removes `key`.
    Del(Vec<u8>),
    /// Member `node`'s store holds everything before `applied` on its disk.
    Marker {
        /// The member.
        node: u32,
        /// The first record its store's disk lacks.
        applied: u64,
    },
    /// A sharded store's write: sets `key` to `value` (`None`: removes it),
    /// unless the store applied this writer's request (or a later one of it)
    /// already. A write to a key whose range is being pulled to this shard claims
    /// the key: a record pulled later does not overwrite it.
    Write {
        /// The key.
        key: Vec<u8>,
        /// The value (`None`: a delete).
        value: Option<Vec<u8>>,
        /// The client request it answers.
        by: Writer,
    },
    /// Migration `migration` starts pulling `range` here: the old owner's table
    /// of the requests it applied (`writers`) joins this store's.
    BeginPull {
        /// The migration.
        migration: u64,
        /// The range it moves here.
        range: Range,
        /// The old owner's writers.
        writers: Vec<Writer>,
    },
    /// Records pulled from a range's old owner for migration `migration`: each
    /// sets its key unless a claim of it came first.
    Pulled {
        /// The migration.
        migration: u64,
        /// The records.
        pairs: Vec<Pair>,
    },
    /// Migration `migration` is over here: its range's claims are forgotten.
    EndPull {
        /// The migration.
        migration: u64,
    },
    /// Migration `migration` moved `range` away and its new owner holds it: its
    /// keys are removed here, but for the parts a later migration brought back
    /// (a late repeat of the drop).
    DropRange {
        /// The migration.
        migration: u64,
        /// The range.
        range: Range,
    },
}

/// A client request that writes: the client's number and the request's, which
/// goes up by one with each write the client makes (a retry keeps it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Writer {
    /// The client.
    pub client: u64,
    /// Its request.
    pub seq: u64,
}

/// Why bytes are not a log record of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UpdateError {
    /// The first byte names no kind of record.
    #[error("an unknown kind of record")]
    Kind,
    /// The record ends early, or runs on past its end.
    #[error("a record of the wrong length")]
    Length,
}

fn put_bytes(v: &mut Vec<u8>, b: &[u8]) {
    v.extend((b.len() as u32).to_le_bytes());
    v.extend(b);
}

fn put_range(v: &mut Vec<u8>, r: &Range) {
    v.extend(r.first.to_le_bytes());
    v.extend(r.last.to_le_bytes());
}

/// A reader over a record's bytes that fails with [`UpdateError::Length`].
struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], UpdateError> {
        if self.0.len() < n {
            return Err(UpdateError::Length);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }

    fn u32(&mut self) -> Result<u32, UpdateError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| UpdateError::Length)?))
    }

    fn u64(&mut self) -> Result<u64, UpdateError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| UpdateError::Length)?))
    }

    fn bytes(&mut self) -> Result<Vec<u8>, UpdateError> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }

    fn range(&mut self) -> Result<Range, UpdateError> {
        let r = Range { first: self.u64()?, last: self.u64()? };
        if r.first > r.last {
            return Err(UpdateError::Length);
        }
        Ok(r)
    }

    fn end(self) -> Result<(), UpdateError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(UpdateError::Length)
        }
    }
}

impl Update {
    /// Its bytes in the log.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        match self {
            Update::Put(k, val) => {
                v.push(b'P');
                put_bytes(&mut v, k);
                v.extend(val);
            }
            Update::Del(k) => {
                v.push(b'D');
                put_bytes(&mut v, k);
            }
            Update::Marker { node, applied } => {
                v.push(b'M');
                v.extend(node.to_le_bytes());
                v.extend(applied.to_le_bytes());
            }
            Update::Write { key, value, by } => {
                v.push(b'W');
                put_bytes(&mut v, key);
                v.extend(by.client.to_le_bytes());
                v.extend(by.seq.to_le_bytes());
                v.push(u8::from(value.is_some()));
                v.extend(value.as_deref().unwrap_or_default());
            }
            Update::BeginPull { migration, range, writers } => {
                v.push(b'B');
                v.extend(migration.to_le_bytes());
                put_range(&mut v, range);
                v.extend((writers.len() as u32).to_le_bytes());
                for w in writers {
                    v.extend(w.client.to_le_bytes());
                    v.extend(w.seq.to_le_bytes());
                }
            }
            Update::Pulled { migration, pairs } => {
                v.push(b'L');
                v.extend(migration.to_le_bytes());
                v.extend((pairs.len() as u32).to_le_bytes());
                for (k, val) in pairs {
                    put_bytes(&mut v, k);
                    put_bytes(&mut v, val);
                }
            }
            Update::EndPull { migration } => {
                v.push(b'E');
                v.extend(migration.to_le_bytes());
            }
            Update::DropRange { migration, range } => {
                v.push(b'X');
                v.extend(migration.to_le_bytes());
                put_range(&mut v, range);
            }
        }
        v
    }

    /// Decodes a record (log bytes: checked, never trusted).
    pub fn decode(rec: &[u8]) -> Result<Update, UpdateError> {
        let (&op, rest) = rec.split_first().ok_or(UpdateError::Length)?;
        let mut b = Bytes(rest);
        let u = match op {
            b'P' => {
                let k = b.bytes()?;
                return Ok(Update::Put(k, b.0.to_vec()));
            }
            b'D' => Update::Del(b.bytes()?),
            b'M' => Update::Marker { node: b.u32()?, applied: b.u64()? },
            b'W' => {
                let key = b.bytes()?;
                let by = Writer { client: b.u64()?, seq: b.u64()? };
                let value = match b.take(1)?[0] {
                    0 if b.0.is_empty() => None,
                    1 => Some(b.0.to_vec()),
                    _ => return Err(UpdateError::Length),
                };
                return Ok(Update::Write { key, value, by });
            }
            b'B' => {
                let migration = b.u64()?;
                let range = b.range()?;
                let n = b.u32()? as usize;
                if n > b.0.len() / 16 {
                    return Err(UpdateError::Length);
                }
                let writers =
                    (0..n).map(|_| Ok(Writer { client: b.u64()?, seq: b.u64()? })).collect::<Result<_, _>>()?;
                Update::BeginPull { migration, range, writers }
            }
            b'L' => {
                let migration = b.u64()?;
                let n = b.u32()? as usize;
                // Each pair takes at least 8 bytes: a count beyond that is a lie.
                if n > b.0.len() / 8 {
                    return Err(UpdateError::Length);
                }
                let mut pairs = Vec::with_capacity(n);
                for _ in 0..n {
                    pairs.push((b.bytes()?, b.bytes()?));
                }
                Update::Pulled { migration, pairs }
            }
            b'E' => Update::EndPull { migration: b.u64()? },
            b'X' => Update::DropRange { migration: b.u64()?, range: b.range()? },
            _ => return Err(UpdateError::Kind),
        };
        b.end()?;
        Ok(u)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_round_trip_and_garbage_is_refused() {
        let r = Range { first: 3, last: 9 };
        for u in [
            Update::Put(b"k".to_vec(), b"value".to_vec()),
            Update::Put(Vec::new(), Vec::new()),
            Update::Del(b"key".to_vec()),
            Update::Marker { node: 3, applied: 99 },
            Update::Write { key: b"k".to_vec(), value: Some(b"v".to_vec()), by: Writer { client: 7, seq: 2 } },
            Update::Write { key: b"k".to_vec(), value: Some(Vec::new()), by: Writer { client: 7, seq: 2 } },
            Update::Write { key: b"k".to_vec(), value: None, by: Writer { client: 1, seq: 9 } },
            Update::Pulled { migration: 4, pairs: vec![(b"a".to_vec(), b"1".to_vec()), (Vec::new(), Vec::new())] },
            Update::Pulled { migration: 4, pairs: Vec::new() },
            Update::BeginPull { migration: 4, range: r, writers: vec![Writer { client: 3, seq: 5 }] },
            Update::BeginPull { migration: 4, range: Range::ALL, writers: Vec::new() },
            Update::EndPull { migration: 4 },
            Update::DropRange { migration: 3, range: Range::ALL },
        ] {
            assert_eq!(Update::decode(&u.encode()), Ok(u));
        }
        for bad in [
            &b""[..],
            b"P",
            b"P\xff\xff\xff\xff",
            b"Dk",
            b"D\x01\0\0\0kk",
            b"M\x01",
            b"W\x01\0\0\0k\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x02",
            b"W\x01\0\0\0k\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x00v",
            b"L\0\0\0\0\0\0\0\0\xff\xff\xff\x0f",
            b"L\0\0\0\0\0\0\0\0\x01\0\0\0\x01\0\0\0k",
            b"L\0\0\0\0\0\0\0\0\0\0\0\0\x09",
            b"B\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff\x09\0\0\0",
            b"E\x01",
            b"X\0\0\0\0\0\0\0\0\x09\0\0\0\0\0\0\0\x03\0\0\0\0\0\0\0",
        ] {
            assert!(Update::decode(bad).is_err(), "{bad:?}");
        }
        assert_eq!(Update::decode(b"Z"), Err(UpdateError::Kind));
    }
}
