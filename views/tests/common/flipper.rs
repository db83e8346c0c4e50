//! A tcp relay for tests of authenticated links: it records every byte it
//! passes, and once armed flips one bit of the next chunk from the client side.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

/// A tcp relay that, once armed, flips one bit in the middle of the next chunk it
/// passes from the client to the member.
pub struct Flipper {
    pub addr: SocketAddr,
    armed: std::sync::Arc<spindle_sst::sync::atomic::AtomicBool>,
    /// Every byte it passed, both ways.
    pub seen: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Flipper {
    pub fn start(to: SocketAddr) -> Flipper {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let armed = std::sync::Arc::new(spindle_sst::sync::atomic::AtomicBool::new(false));
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (flag, s1, s2) = (armed.clone(), seen.clone(), seen.clone());
        std::thread::spawn(move || {
            let Ok((client, _)) = l.accept() else { return };
            let Ok(member) = TcpStream::connect(to) else { return };
            let (c2, m2) = (client.try_clone().unwrap(), member.try_clone().unwrap());
            std::thread::spawn(move || pipe(m2, c2, None, s2));
            pipe(client, member, Some(flag), s1);
        });
        Flipper { addr, armed, seen }
    }

    pub fn arm(&self) {
        self.armed.store(true, spindle_sst::sync::atomic::Ordering::SeqCst);
    }
}

fn pipe(
    mut from: TcpStream,
    mut to: TcpStream,
    flip: Option<std::sync::Arc<spindle_sst::sync::atomic::AtomicBool>>,
    seen: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
) {
    from.set_read_timeout(Some(WAIT)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        seen.lock().unwrap().extend_from_slice(&buf[..n]);
        if let Some(f) = &flip {
            if f.swap(false, spindle_sst::sync::atomic::Ordering::SeqCst) {
                buf[n / 2] ^= 0x10;
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}
