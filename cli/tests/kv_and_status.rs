//! `spindle kv serve` as a new user starts it (nothing chosen but the loopback
//! address), used from outside with `kv put/get/del/scan/status` and looked at with
//! `spindle status`; a sharded store served the same way, a range moved with
//! `kv migrate`; `spindle bench` on a small run; completions. Every command
//! runs as a child with a deadline.

mod common;
use std::process::Command;
use std::time::Duration;
use testkit::{LineChild, TempDirs};

const WAIT: Duration = Duration::from_secs(60);

/// The keys of `kv scan --json`'s lines, in their order.
fn scanned_keys(out: &str) -> Vec<String> {
    out.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["key"].as_str().unwrap().to_string())
        .collect()
}

/// `spindle ARGS` with nothing on stdin.
fn spindle(args: &[&str]) -> (i32, String, String) {
    common::spindle(args, "")
}

#[test]
fn a_store_served_by_the_command_is_used_and_looked_at_by_it() {
    let name = format!("clikv{}", std::process::id());
    let data = TempDirs::new(&name, 1);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_spindle"));
    cmd.args(["kv", "serve", "--ip", "127.0.0.1", "--replicas", "1", "--ack", "disk", "--name", &name])
        .env("SPINDLE_DATA_DIR", &data[0]);
    let mut serve = LineChild::start(cmd);
    let line = serve.expect("that it serves", WAIT, |l| l.contains(" serving at "));
    let addr = line.split(" serving at ").nth(1).and_then(|r| r.split(' ').next()).unwrap().to_string();
    let id: u32 = line.strip_prefix("member n").and_then(|r| r.split(' ').next()).unwrap().parse().unwrap();
    let kv = |args: &[&str]| {
        let mut all = vec!["kv"];
        all.extend(args);
        all.extend(["--connect", &addr]);
        spindle(&all)
    };
    let (code, out, err) = kv(&["put", "colour", "blue"]);
    assert_eq!((code, out.trim()), (0, "ok (record 0)"), "{err}");
    let (code, out, err) = kv(&["put", "column", "3"]);
    assert_eq!((code, out.trim()), (0, "ok (record 1)"), "{err}");
    let (code, out, err) = kv(&["get", "colour"]);
    assert_eq!((code, out.trim()), (0, "blue"), "{err}");
    let (code, out, err) = kv(&["scan", "col", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(scanned_keys(&out), ["colour", "column"]);
    let (code, _, err) = kv(&["del", "colour"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = kv(&["get", "colour"]);
    assert_eq!(code, 4, "a missing key exits with 4: {out} {err}");
    assert!(err.contains("no key `colour`"), "{err}");
    let (code, out, err) = kv(&["status", "--json"]);
    assert_eq!(code, 0, "{err}");
    let s: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(s["primary"], id, "{s}");
    assert_eq!(s["applied"], 3, "three updates applied: {s}");

    // The group's status: one member, itself, no lag.
    let (code, out, err) = spindle(&["status", "--json", "--connect", &addr]);
    assert_eq!(code, 0, "{err}");
    let s: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(s["node"], id, "{s}");
    assert_eq!(s["members"].as_array().map(|m| m.len()), Some(1), "{s}");
    assert_eq!(s["members"][0]["addr"], addr.as_str(), "{s}");
    let (code, out, _) = spindle(&["status", "--connect", &addr]);
    assert_eq!(code, 0);
    assert!(out.contains(&format!("member n{id} answered")), "{out}");

    serve.kill();
    spindle::sst::transport::shm::remove_stale_files();
    let (code, _, err) = spindle(&["kv", "get", "colour", "--timeout", "1", "--connect", &addr]);
    assert_eq!(code, 3, "no member there any more: {err}");
}

/// The files of a certificate `spindle keys` issued: (ca, cert, key).
struct Issued {
    ca: String,
    cert: String,
    key: String,
}

/// `spindle keys ca DIR`, then `spindle keys issue` for each name.
fn make_ca(dir: &std::path::Path, names: &[&str]) -> Vec<Issued> {
    let d = dir.display().to_string();
    let (code, out, err) = spindle(&["keys", "ca", &d]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ca.pem") && out.contains("ca.key"), "{out}");
    names
        .iter()
        .map(|n| {
            let (code, _, err) = spindle(&["keys", "issue", "--ca-dir", &d, n]);
            assert_eq!(code, 0, "{err}");
            let f = |x: String| dir.join(x).display().to_string();
            Issued { ca: f("ca.pem".into()), cert: f(format!("{n}.pem")), key: f(format!("{n}.key")) }
        })
        .collect()
}

#[test]
fn a_store_of_certificates_answers_only_the_commands_that_give_certificates_of_its_ca() {
    let name = format!("clicert{}", std::process::id());
    let dirs = TempDirs::new(&name, 3);
    let made = make_ca(&dirs[1], &["store-1", "operator", "intruder"]);
    let other = make_ca(&dirs[2], &["operator"]);
    let (member, op, stranger, intruder) = (&made[0], &made[1], &other[0], &made[2]);
    // An empty revocation list to start the member with; a certificate of
    // another CA cannot be put on it.
    let ca_dir = dirs[1].display().to_string();
    let (code, out, err) = spindle(&["keys", "revoke", "--ca-dir", &ca_dir]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("crl.pem"), "{out}");
    let crl = dirs[1].join("crl.pem");
    let (code, _, err) = spindle(&["keys", "revoke", "--ca-dir", &ca_dir, &stranger.cert]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a certificate of this CA"), "{err}");
    // Keys are the owner's only, and nothing is written over.
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&member.key).unwrap().permissions().mode() & 0o777, 0o600);
    let (code, _, err) = spindle(&["keys", "issue", "--ca-dir", &dirs[1].display().to_string(), "operator"]);
    assert_eq!(code, 1, "an existing certificate is not replaced: {err}");
    assert!(err.contains("exists"), "{err}");

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_spindle"));
    cmd.args(["kv", "serve", "--ip", "127.0.0.1", "--replicas", "1", "--name", &name])
        .env("SPINDLE_DATA_DIR", &dirs[0])
        .env("SPINDLE_CA_FILE", &member.ca)
        .env("SPINDLE_CERT_FILE", &member.cert)
        .env("SPINDLE_KEY_FILE", &member.key)
        .env("SPINDLE_IDENTITY", "store-1")
        .env("SPINDLE_CRL_FILE", &crl);
    let mut serve = LineChild::start(cmd);
    let line = serve.expect("that it serves", WAIT, |l| l.contains(" serving at "));
    let addr = line.split(" serving at ").nth(1).and_then(|r| r.split(' ').next()).unwrap().to_string();
    let with = |f: &Issued, who: &str, args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--connect", &addr, "--timeout", "10", "--ca", &f.ca, "--cert", &f.cert, "--key", &f.key]);
        all.extend(["--identity", who]);
        spindle(&all)
    };
    let (code, out, err) = with(op, "operator", &["kv", "put", "colour", "blue"]);
    assert_eq!((code, out.trim()), (0, "ok (record 0)"), "{err}");
    let (code, out, err) = with(op, "operator", &["kv", "get", "colour"]);
    assert_eq!((code, out.trim()), (0, "blue"), "{err}");
    let (code, out, err) = with(op, "operator", &["status", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"members\""), "{out}");
    // Without credentials, or with another CA's: refused, exit 3, told why.
    let (code, _, err) = spindle(&["status", "--connect", &addr, "--timeout", "10"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("authentication required"), "{err}");
    let (code, _, err) = with(stranger, "operator", &["kv", "get", "colour"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("authentication failed"), "{err}");
    // A certificate revoked while the member runs: its holder is refused from
    // the next connection and told why; a later list still revokes it.
    let (code, out, err) = with(intruder, "intruder", &["kv", "get", "colour"]);
    assert_eq!((code, out.trim()), (0, "blue"), "before it is revoked: {err}");
    let (code, _, err) = spindle(&["keys", "revoke", "--ca-dir", &ca_dir, &intruder.cert]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = spindle(&["keys", "revoke", "--ca-dir", &ca_dir]);
    assert_eq!(code, 0, "a list written again keeps what it revoked: {err}");
    let (code, _, err) = with(intruder, "intruder", &["kv", "get", "colour"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("revoked"), "{err}");
    let (code, out, err) = with(op, "operator", &["kv", "get", "colour"]);
    assert_eq!((code, out.trim()), (0, "blue"), "a certificate the list does not name: {err}");
    // A certificate without its CA is a usage error.
    let (code, _, err) = spindle(&["status", "--connect", &addr, "--cert", "x.pem"]);
    assert_eq!(code, 2, "{err}");
    serve.kill();
    spindle::sst::transport::shm::remove_stale_files();
}

#[test]
fn bench_runs_a_small_group_and_its_members_agree() {
    let (code, out, err) = spindle(&["bench", "--nodes", "2", "--count", "2000", "--size", "64", "--json"]);
    assert_eq!(code, 0, "{err}");
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["agree"], true, "{out}");
    assert_eq!(out.lines().count(), 3, "a line per member and the summary: {out}");
    let (code, _, err) = spindle(&["bench", "--size", "4"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn completions_are_printed_for_a_shell() {
    let (code, out, err) = spindle(&["completions", "bash"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("_spindle") && out.contains("kv"), "a bash completion function");
}

#[test]
fn a_sharded_store_served_by_the_command_moves_a_range_and_keeps_its_keys() {
    let name = format!("clikvs{}", std::process::id());
    let data = TempDirs::new(&name, 1);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_spindle"));
    cmd.args(["kv", "serve", "--ip", "127.0.0.1", "--replicas", "1", "--shards", "2", "--name", &name])
        .env("SPINDLE_DATA_DIR", &data[0]);
    let mut serve = LineChild::start(cmd);
    let line = serve.expect("that it serves", WAIT, |l| l.contains(" serving at "));
    assert!(line.contains("(2 shards)"), "{line}");
    let addr = line.split(" serving at ").nth(1).and_then(|r| r.split(' ').next()).unwrap().to_string();
    let kv = |args: &[&str]| {
        let mut all = vec!["kv"];
        all.extend(args);
        all.extend(["--connect", &addr]);
        spindle(&all)
    };
    let keys: Vec<String> = (0..12).map(|i| format!("key{i}")).collect();
    for k in &keys {
        let (code, out, err) = kv(&["put", k, &format!("{k}-value")]);
        assert_eq!((code, out.trim()), (0, "ok"), "{err}");
    }
    let (code, out, err) = kv(&["status", "--json"]);
    assert_eq!(code, 0, "{err}");
    let s: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(s["shares_ppm"], serde_json::json!([500000, 500000]), "{s}");
    // Shard 0's half of the hashes moves to shard 1.
    let (code, out, err) = kv(&["migrate", "0-7fffffffffffffff", "1"]);
    assert_eq!(code, 0, "{out} {err}");
    assert!(out.contains("migration done"), "{out}");
    let (code, out, err) = kv(&["status", "--json"]);
    assert_eq!(code, 0, "{err}");
    let s: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(s["shares_ppm"], serde_json::json!([0, 1000000]), "{s}");
    assert_eq!(s["migrations"], serde_json::json!([]), "{s}");
    for k in &keys {
        let (code, out, err) = kv(&["get", k]);
        assert_eq!((code, out.trim()), (0, format!("{k}-value").as_str()), "{err}");
    }
    // A move the map refuses is a usage error, and so is a range that is not one.
    let (code, _, err) = kv(&["migrate", "0-ff", "7"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("shard 7 is not one of the map's"), "{err}");
    let (code, _, err) = kv(&["migrate", "ff-0", "0"]);
    assert_eq!(code, 2, "{err}");
    // A scan gathers every shard's part, in key order.
    let (code, out, err) = kv(&["scan", "key", "--json"]);
    assert_eq!(code, 0, "{err}");
    let mut want = keys.clone();
    want.sort();
    assert_eq!(scanned_keys(&out), want);
    serve.kill();
    spindle::sst::transport::shm::remove_stale_files();
}
