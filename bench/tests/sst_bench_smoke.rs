//! sst_bench runs on every transport with 2 and 3 nodes and prints one well-formed
//! JSON line. Short phases: this checks behaviour, not speed.

use std::process::Command;

fn run(transport: &str, nodes: usize) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_sst_bench"))
        .args(["--transport", transport, "--nodes", &nodes.to_string()])
        .args(["--seconds", "0.3", "--idle-seconds", "0.3", "--json"])
        .output()
        .expect("run sst_bench");
    assert!(out.status.success(), "sst_bench failed: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line: {stdout}");
    serde_json::from_str(lines[0]).expect("valid JSON")
}

fn check(transport: &str, nodes: usize) {
    let v = run(transport, nodes);
    assert_eq!(v["bench"], "sst");
    assert_eq!(v["transport"], transport);
    assert_eq!(v["nodes"], nodes);
    assert!(v["rtt_samples"].as_u64().unwrap() > 0);
    let (p50, p99) = (v["rtt_us_p50"].as_f64().unwrap(), v["rtt_us_p99"].as_f64().unwrap());
    assert!(p50 > 0.0 && p99 >= p50, "{v}");
    assert!(v["pushes_per_s"].as_f64().unwrap() > 0.0);
    let idle = v["idle_cpu_pct_nodes"].as_array().unwrap();
    assert_eq!(idle.len(), nodes);
    assert!(idle.iter().all(|x| x.as_f64().is_some_and(|p| p >= 0.0)), "every node measured its idle CPU: {v}");
    assert_eq!(v["suspicions"], 0, "no node was suspected in a healthy run: {v}");
}

#[test]
fn mem_2_and_3_nodes() {
    check("mem", 2);
    check("mem", 3);
}

#[test]
fn shm_2_and_3_nodes() {
    check("shm", 2);
    check("shm", 3);
}

#[test]
fn tcp_2_and_3_nodes() {
    check("tcp", 2);
    check("tcp", 3);
}

#[test]
fn bad_arguments_are_clear_errors() {
    let out = Command::new(env!("CARGO_BIN_EXE_sst_bench")).args(["--nodes", "1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--nodes must be at least 2"));
    let out = Command::new(env!("CARGO_BIN_EXE_sst_bench")).args(["--transport", "udp"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown transport"));
}

/// SIGINT to a running multi-process bench: it exits with 130 and leaves neither
/// child processes nor /dev/shm files behind.
#[test]
fn interrupted_run_cleans_up() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let mut bench = Command::new(env!("CARGO_BIN_EXE_sst_bench"))
        .args(["--transport", "shm", "--nodes", "3", "--seconds", "30", "--idle-seconds", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait (bounded by the bench's own setup deadline) for "joined (group NAME)".
    let mut group = None;
    for line in BufReader::new(bench.stderr.take().unwrap()).lines().map_while(Result::ok) {
        if let Some(g) = line.split("(group ").nth(1) {
            group = Some(g.trim_end_matches(')').to_string());
            break;
        }
    }
    let group = group.expect("the bench reported its group");
    let files = || {
        std::fs::read_dir("/dev/shm")
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&format!("spindle-{group}-")))
            .count()
    };
    assert_eq!(files(), 3, "three nodes mapped their files");
    let children = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .filter(|stat| {
                let ppid = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(1).map(str::to_owned));
                ppid.as_deref() == Some(bench.id().to_string().as_str())
            })
            .count()
    };
    assert_eq!(children(), 3);
    let kill = Command::new("kill").args(["-INT", &bench.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(s) = bench.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = bench.kill();
            panic!("the bench did not stop after SIGINT");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(130));
    assert_eq!(files(), 0, "no /dev/shm files left");
}
