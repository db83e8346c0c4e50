//! The few system calls the `tcp` paths and the doorbell need that neither std nor
//! socket2 offers safely: a `recv` that never blocks on an otherwise blocking socket,
//! a `sendmsg` of raw iovecs (pieces that point into regions), `ppoll` over several
//! descriptors, an eventfd, and `membarrier` (the doorbell's fence on behalf of the
//! threads that ring it).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Reads what `fd` has without blocking (`MSG_DONTWAIT`), whatever the descriptor's
/// own blocking mode. `Ok(0)` is the end of the stream; `WouldBlock` means nothing is
/// there now.
pub(crate) fn recv_dontwait(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live, writable slice of `buf.len()` bytes for the whole call,
    // and `fd` is an open descriptor borrowed for the call; recv writes at most
    // `buf.len()` bytes into it.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Sends the bytes `iov` points at without blocking and without SIGPIPE; returns how
/// many the socket took (`WouldBlock` where it took none).
///
/// # Safety
///
/// Every iovec must point at `iov_len` readable bytes that stay allocated for the
/// call.
pub(crate) unsafe fn send_iovecs(fd: BorrowedFd<'_>, iov: &[libc::iovec]) -> io::Result<usize> {
    // SAFETY: a msghdr is plain data, valid all zeros (no name, no iovecs, no control).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_ptr().cast_mut();
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: `msg` names `iov.len()` iovecs that the caller vouches for, and no
    // address or control data; `fd` is an open descriptor borrowed for the call.
    let n = unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Waits until one of `fds` is readable (or hung up, or in error), or `timeout`
/// passes (`None`: no limit). Returns how many are ready (0 on timeout or signal).
pub(crate) fn wait_readable(fds: &[RawFd], timeout: Option<Duration>) -> usize {
    wait_for(fds, &[], timeout)
}

/// Waits until one of `read` is readable or one of `write` writable (or one is hung
/// up, or in error), or `timeout` passes (`None`: no limit). Returns how many are
/// ready (0 on timeout or signal).
pub(crate) fn wait_for(read: &[RawFd], write: &[RawFd], timeout: Option<Duration>) -> usize {
    let entry = |fd, events| libc::pollfd { fd, events, revents: 0 };
    let mut p: Vec<libc::pollfd> = (read.iter().map(|&fd| entry(fd, libc::POLLIN)))
        .chain(write.iter().map(|&fd| entry(fd, libc::POLLOUT)))
        .collect();
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `p` holds `p.len()` initialized pollfd entries, alive and exclusively
    // ours for the call; `ts_ptr` is null or points to a timespec on our stack; the
    // signal mask pointer is null (the mask is left as it is).
    let n = unsafe { libc::ppoll(p.as_mut_ptr(), p.len() as libc::nfds_t, ts_ptr, std::ptr::null()) };
    n.max(0) as usize
}

/// An eventfd: a counter another thread bumps to wake a `wait_readable` on it.
#[derive(Debug)]
pub(crate) struct WakeFd(OwnedFd);

impl WakeFd {
    /// A non-blocking, close-on-exec eventfd.
    pub(crate) fn new() -> io::Result<WakeFd> {
        // SAFETY: eventfd takes two integers and returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd, is open, and nothing else owns it.
        Ok(WakeFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Makes the descriptor readable (wakes a waiter on it).
    pub(crate) fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes the 8 bytes of `one`, alive on our stack, to our open eventfd.
        // A full counter (EAGAIN) is already readable, which is all a notify needs.
        unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Resets the counter (the descriptor is no longer readable until the next notify).
    pub(crate) fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into `v`, alive on our stack, from our open
        // non-blocking eventfd; an empty counter returns EAGAIN and leaves `v` alone.
        unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    /// The descriptor, to wait on.
    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

impl AsFd for WakeFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// `membarrier(2)` commands (`linux/membarrier.h`).
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

/// Registers this process for [`membarrier`]; false where the kernel (or a
/// seccomp filter) does not offer it.
pub(crate) fn membarrier_register() -> bool {
    // SAFETY: the command takes no pointer; the call only changes this process's
    // membarrier registration.
    unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0u32, 0i32) == 0 }
}

/// Makes every running thread of this process pass a full memory barrier before
/// this returns (`MEMBARRIER_CMD_PRIVATE_EXPEDITED`; [`membarrier_register`] must
/// have succeeded). True on success.
pub(crate) fn membarrier() -> bool {
    // SAFETY: as above: no pointer, no memory of ours is touched.
    unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0u32, 0i32) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Instant;

    #[test]
    fn wake_fd_wakes_and_drains() {
        let w = WakeFd::new().unwrap();
        assert_eq!(wait_readable(&[w.raw()], Some(Duration::ZERO)), 0, "quiet before a notify");
        w.notify();
        w.notify();
        assert_eq!(wait_readable(&[w.raw()], Some(Duration::from_secs(5))), 1);
        w.drain();
        let t = Instant::now();
        assert_eq!(wait_readable(&[w.raw()], Some(Duration::from_millis(20))), 0, "drained");
        assert!(t.elapsed() >= Duration::from_millis(15), "the timeout was waited out");
    }

    #[test]
    fn membarrier_works_once_registered() {
        // Where the kernel offers it (this project's CI hosts do), registering and
        // the barrier both succeed; where it does not, the doorbell fences instead.
        if membarrier_register() {
            assert!(membarrier(), "a registered process's barrier succeeds");
        }
    }

    #[test]
    fn recv_dontwait_never_blocks() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        let mut buf = [0u8; 16];
        let e = recv_dontwait(b.as_fd(), &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "nothing sent yet");
        a.write_all(b"hello").unwrap();
        assert_eq!(wait_readable(&[b.as_raw_fd()], Some(Duration::from_secs(5))), 1);
        assert_eq!(recv_dontwait(b.as_fd(), &mut buf).unwrap(), 5);
        assert_eq!(&buf[..5], b"hello");
        drop(a);
        assert_eq!(recv_dontwait(b.as_fd(), &mut buf).unwrap(), 0, "end of stream");
    }
}
