//! `ls`, `echo` and `pub`: a DDS domain from outside, as a client of a member.

use crate::out::{CliError, Out};
use crate::Target;
use serde_json::{json, Value};
use spindle::dds::{ClientConfig, DdsError, DomainClient, Endpoint, History, Qos, Sample, TopicError};
use std::io::BufRead;
use std::time::{Duration, Instant, UNIX_EPOCH};

/// A client of the first member of `target` that takes it.
pub fn connect(target: &Target) -> Result<DomainClient, CliError> {
    let mut cfg = ClientConfig::new(target.connect.clone());
    let t = Duration::from_secs(target.timeout);
    cfg.connect_timeout = t;
    cfg.request_timeout = t;
    cfg.failover_timeout = t;
    cfg.secret_file = target.secret_file.clone();
    if target.cert.is_some() {
        cfg.credentials = crate::credentials(target)?;
    }
    DomainClient::connect(cfg)
        .map_err(|e| CliError::unreachable(format!("no member of {:?} took the client: {e}", target.connect)))
}

/// A DDS error of an operation on `topic`, with the exit code it deserves.
fn dds_error(topic: &str, e: DdsError) -> CliError {
    match e {
        DdsError::Topic { why: TopicError::NoSuchTopic, .. } => {
            CliError::not_found(format!("no topic `{topic}` in the domain"))
        }
        e => CliError::failed(format!("{topic}: {e}")),
    }
}

fn endpoints(list: &[Endpoint], members: &[u32]) -> String {
    if list.is_empty() {
        return "none".into();
    }
    let one = |e: &Endpoint| {
        let who = if e.is_proxy() { "clients".to_string() } else { format!("w{}", e.id) };
        let gone = if members.contains(&e.node) { "" } else { " (not a member)" };
        format!("n{}/{who} {}{gone}", e.node, e.level.name())
    };
    list.iter().map(one).collect::<Vec<_>>().join(", ")
}

pub fn ls(out: &Out, target: &Target) -> Result<(), CliError> {
    let client = connect(target)?;
    let d = client.domain().map_err(|e| CliError::failed(format!("the domain: {e}")))?;
    let members: Vec<u32> = d.members.iter().map(|m| m.0).collect();
    let t = &d.table;
    out.emit(
        || {
            let mut s = format!("view {}  members {:?}\n{} topics", d.view.0, members, t.topics.len());
            for e in &t.topics {
                let q = e.qos;
                let history = match q.history {
                    History::KeepLast(n) => format!("keep last {n}"),
                    History::KeepAll => format!("keep all (at most {})", q.max_samples),
                };
                s += &format!("\n  {}  type {}  {} {history}", e.name, e.type_name, q.level.name());
                s += &format!("\n    writers: {}", endpoints(&e.writers, &members));
                s += &format!("\n    readers: {}", endpoints(&e.readers, &members));
            }
            s += &format!("\n{} logs", t.logs.len());
            for l in &t.logs {
                s += &format!("\n  {}  {:?}", l.name, l.qos);
            }
            s
        },
        || {
            json!({
                "view": d.view.0, "members": members,
                "topics": serde_json::to_value(&t.topics).unwrap_or(Value::Null),
                "logs": t.logs.iter().map(|l| json!({"name": l.name, "qos": format!("{:?}", l.qos)})).collect::<Vec<_>>(),
            })
        },
    );
    Ok(())
}

/// The primitive types a topic of serde values can have that this command can
/// read and write as JSON.
#[derive(Debug, Clone, Copy)]
enum Known {
    Str,
    U64,
    U32,
    U8,
    I64,
    I32,
    F64,
    F32,
    Bool,
}

fn known(type_name: &str) -> Option<Known> {
    let base = type_name.split('#').next().unwrap_or(type_name);
    Some(match base {
        "serde:String" => Known::Str,
        "serde:u64" => Known::U64,
        "serde:u32" => Known::U32,
        "serde:u8" => Known::U8,
        "serde:i64" => Known::I64,
        "serde:i32" => Known::I32,
        "serde:f64" => Known::F64,
        "serde:f32" => Known::F32,
        "serde:bool" => Known::Bool,
        _ => return None,
    })
}

/// A sample's bytes as JSON, for the types it knows (else `None`).
fn to_json(k: Known, b: &[u8]) -> Option<Value> {
    fn take<T: serde::de::DeserializeOwned>(b: &[u8]) -> Option<T> {
        match postcard::take_from_bytes::<T>(b) {
            Ok((v, [])) => Some(v),
            _ => None,
        }
    }
    Some(match k {
        Known::Str => json!(take::<String>(b)?),
        Known::U64 => json!(take::<u64>(b)?),
        Known::U32 => json!(take::<u32>(b)?),
        Known::U8 => json!(take::<u8>(b)?),
        Known::I64 => json!(take::<i64>(b)?),
        Known::I32 => json!(take::<i32>(b)?),
        Known::F64 => json!(take::<f64>(b)?),
        Known::F32 => json!(take::<f32>(b)?),
        Known::Bool => json!(take::<bool>(b)?),
    })
}

/// A JSON value as the bytes of a sample of type `k`.
fn from_json(k: Known, v: &Value) -> Result<Vec<u8>, String> {
    fn enc<T: serde::Serialize>(t: &T) -> Result<Vec<u8>, String> {
        postcard::to_stdvec(t).map_err(|e| e.to_string())
    }
    let int = |v: &Value| v.as_i64().map(i128::from).or_else(|| v.as_u64().map(i128::from));
    let range = |what: &str| format!("{v} is not a {what}");
    match k {
        Known::Str => enc(&v.as_str().ok_or_else(|| range("string"))?),
        Known::U64 => enc(&u64::try_from(int(v).ok_or_else(|| range("u64"))?).map_err(|_| range("u64"))?),
        Known::U32 => enc(&u32::try_from(int(v).ok_or_else(|| range("u32"))?).map_err(|_| range("u32"))?),
        Known::U8 => enc(&u8::try_from(int(v).ok_or_else(|| range("u8"))?).map_err(|_| range("u8"))?),
        Known::I64 => enc(&i64::try_from(int(v).ok_or_else(|| range("i64"))?).map_err(|_| range("i64"))?),
        Known::I32 => enc(&i32::try_from(int(v).ok_or_else(|| range("i32"))?).map_err(|_| range("i32"))?),
        Known::F64 => enc(&v.as_f64().ok_or_else(|| range("number"))?),
        Known::F32 => enc(&(v.as_f64().ok_or_else(|| range("number"))? as f32)),
        Known::Bool => enc(&v.as_bool().ok_or_else(|| range("boolean"))?),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

pub fn echo(out: &Out, target: &Target, topic: &str, count: Option<u64>, seconds: Option<f64>) -> Result<(), CliError> {
    let client = connect(target)?;
    let t = client.raw_topic(topic).map_err(|e| dds_error(topic, e))?;
    let k = known(t.type_name());
    let level = t.qos().level;
    let r = client
        .create_reader(&t, Qos { level, ..Qos::default() }.history(History::KeepAll))
        .map_err(|e| dds_error(topic, e))?;
    out.note(&format!("echo {topic}: type {}, {}", t.type_name(), level.name()));
    let (start, within) = (Instant::now(), seconds.map(Duration::from_secs_f64));
    let mut n = 0u64;
    loop {
        if count.is_some_and(|c| n >= c) || within.is_some_and(|w| start.elapsed() >= w) {
            return Ok(());
        }
        if let Some(why) = client.ended() {
            return Err(CliError::unreachable(format!("the client ended: {why}")));
        }
        let left = count.map_or(usize::MAX, |c| (c - n) as usize);
        for s in r.take_n(left.min(1024), Duration::from_millis(200)) {
            print_sample(out, k, &s);
            n += 1;
        }
    }
}

fn print_sample(out: &Out, k: Option<Known>, s: &Sample<Vec<u8>>) {
    let i = &s.info;
    let ts = i.source_timestamp.duration_since(UNIX_EPOCH).unwrap_or_default();
    let value = k.and_then(|k| to_json(k, &s.data));
    let shown = || match &value {
        Some(v) => v.to_string(),
        None if s.data.len() > 64 => format!("{}... ({} bytes)", hex(&s.data[..64]), s.data.len()),
        None => format!("{} ({} bytes)", hex(&s.data), s.data.len()),
    };
    out.emit(
        || {
            format!(
                "#{} {} seq {} view {} ts {}.{:09} instance {} {:?} valid_data={} {}: {}",
                i.topic_seq,
                i.writer,
                i.seq,
                i.view.0,
                ts.as_secs(),
                ts.subsec_nanos(),
                i.instance,
                i.instance_state,
                i.valid_data,
                if i.from_history { "history" } else { "live" },
                shown()
            )
        },
        || {
            json!({
                "topic_seq": i.topic_seq, "writer": i.writer.to_string(), "seq": i.seq, "view": i.view.0,
                "timestamp_ns": ts.as_nanos() as u64, "instance": i.instance.0,
                "instance_state": format!("{:?}", i.instance_state), "valid_data": i.valid_data,
                "from_history": i.from_history,
                "value": value.clone().unwrap_or(Value::Null), "hex": if value.is_none() { Some(hex(&s.data)) } else { None },
            })
        },
    );
}

pub fn publish(out: &Out, target: &Target, topic: &str, raw: bool) -> Result<(), CliError> {
    let client = connect(target)?;
    let t = client.raw_topic(topic).map_err(|e| dds_error(topic, e))?;
    let k = known(t.type_name());
    if k.is_none() && !raw {
        return Err(CliError::usage(format!(
            "topic `{topic}` has type {}, which pub cannot write from JSON (strings, numbers and booleans only); \
             --hex sends encoded samples",
            t.type_name()
        )));
    }
    let w = client.create_writer(&t, t.qos()).map_err(|e| dds_error(topic, e))?;
    let mut n = 0u64;
    for (at, line) in std::io::stdin().lock().lines().enumerate() {
        let line = line.map_err(|e| CliError::failed(format!("reading stdin: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |why: String| CliError::usage(format!("line {}: {why}", at + 1));
        let bytes = match k {
            Some(k) if !raw => {
                let v: Value = serde_json::from_str(&line).map_err(|e| bad(format!("not JSON: {e}")))?;
                from_json(k, &v).map_err(bad)?
            }
            _ => unhex(&line).ok_or_else(|| bad("not hex bytes".into()))?,
        };
        let seq = w.write(&bytes).map_err(|e| dds_error(topic, e))?;
        n += 1;
        out.emit(|| format!("wrote #{seq}"), || json!({ "written": seq }));
    }
    if !w.wait_for_delivery(Duration::from_secs(target.timeout.max(5))) {
        return Err(CliError::failed(format!("{n} written, but not all were delivered in time")));
    }
    out.note(&format!("{n} samples written and delivered"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_values_round_trip_through_the_topic_encoding() {
        for (k, v) in [
            (Known::Str, json!("hi")),
            (Known::U64, json!(u64::MAX)),
            (Known::I32, json!(-7)),
            (Known::F64, json!(1.5)),
            (Known::Bool, json!(true)),
            (Known::U8, json!(255)),
        ] {
            let b = from_json(k, &v).unwrap();
            assert_eq!(to_json(k, &b), Some(v));
        }
        assert!(from_json(Known::U8, &json!(256)).is_err());
        assert!(from_json(Known::U64, &json!(-1)).is_err());
        assert!(from_json(Known::Str, &json!(3)).is_err());
        assert_eq!(to_json(Known::U64, &[1, 2, 3]), None, "trailing bytes are not a u64");
        assert_eq!(unhex("0aff"), Some(vec![10, 255]));
        assert_eq!(unhex("0af"), None);
        assert!(matches!(known("serde:String#0123"), Some(Known::Str)));
        assert!(known("serde:Shape#12").is_none());
    }
}
