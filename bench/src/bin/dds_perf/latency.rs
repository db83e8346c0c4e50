//! Round-trip latency: a ping topic one way, a pong topic back.

use super::{joined, wait_for_endpoints, Args};
use bench::{round, Latency};
use serde_json::{json, Value};
use spindle_dds::{DataReader, DataWriter, DomainParticipant};
use std::time::{Duration, Instant};

pub(crate) fn latency_pub<T: bytemuck::Pod + Send>(
    args: &Args,
    p: &DomainParticipant,
    ping: &spindle_dds::Topic<T>,
    pong: &spindle_dds::Topic<T>,
    child: bool,
) -> Result<Value, String> {
    let w: DataWriter<T> = p.create_writer(ping, ping.qos()).map_err(|e| e.to_string())?;
    let r: DataReader<T> = p.create_reader(pong, pong.qos()).map_err(|e| e.to_string())?;
    wait_for_endpoints(p, "perf", 1, 1)?;
    wait_for_endpoints(p, "perf-pong", 1, 1)?;
    joined(child)?;
    let mut lat = Latency::default();
    let warm = args.count / 10;
    for i in 0..args.count + warm {
        let t = Instant::now();
        let mut loan = w.loan().map_err(|e| e.to_string())?;
        bytemuck::cast_slice_mut::<T, u64>(std::slice::from_mut(&mut *loan))[0] = i;
        loan.write().map_err(|e| e.to_string())?;
        let back = r.take_n(1, Duration::from_secs(10));
        if back.is_empty() {
            return Err(format!("no pong for ping {i}"));
        }
        if i >= warm {
            lat.record(t.elapsed());
        }
    }
    Ok(json!({
        "role": "pub", "round_trips": lat.len(),
        "rtt_p50_us": round(lat.quantile_us(0.5), 1), "rtt_p99_us": round(lat.quantile_us(0.99), 1),
        "rtt_p999_us": round(lat.quantile_us(0.999), 1),
    }))
}

pub(crate) fn latency_sub<T: bytemuck::Pod + Send>(
    args: &Args,
    p: &DomainParticipant,
    ping: &spindle_dds::Topic<T>,
    pong: &spindle_dds::Topic<T>,
    id: u32,
    child: bool,
) -> Result<Value, String> {
    let r: DataReader<T> = p.create_reader(ping, ping.qos()).map_err(|e| e.to_string())?;
    let w: Option<DataWriter<T>> =
        if id == 1 { Some(p.create_writer(pong, pong.qos()).map_err(|e| e.to_string())?) } else { None };
    joined(child)?;
    let total = args.count + args.count / 10;
    let mut n = 0;
    let deadline = Instant::now() + Duration::from_secs(600);
    while n < total && Instant::now() < deadline {
        for s in r.take_n(1, Duration::from_secs(1)) {
            n += 1;
            if let Some(w) = &w {
                w.write(&s.data).map_err(|e| e.to_string())?;
            }
        }
        if p.group().stopped().is_some() {
            break;
        }
    }
    Ok(json!({"role": "sub", "node": id, "echoed": n}))
}
