//! Registered memory: page-aligned byte regions made of atomic words.
//!
//! Region memory is written concurrently by peers (a one-sided write lands while the
//! owner reads), so no `&[u8]` or `&mut [u8]` is formed over it (with one read-only
//! exception, below). All access goes through the word operations of this module:
//!
//! - payload words are loaded and stored `Relaxed`;
//! - a one-sided write that lands here ([`Region::apply_write`], [`Region::copy_to`])
//!   starts with a `Release` fence, so everything written before it (every earlier
//!   write from the same source) is visible to a reader that observes any of its
//!   words with an `Acquire` load;
//! - the word that publishes (a guard, a counter that proves data arrived) is polled
//!   with `Acquire` ([`Region::load`] with `Ordering::Acquire`).
//!
//! Offsets and lengths are in bytes and must be multiples of 8 (one word). This module
//! and [`crate::doorbell`] hold the only pointer arithmetic on shared memory in the
//! workspace. The one way around the word operations is the kernel's: the tcp
//! transport hands it pointers into a region (`Region::recv_into`, `Region::iovec`)
//! to copy a large write's data in or out, as a NIC does for the rdma transport; no
//! Rust reference to those bytes is formed. The exception is a sealed link's cipher:
//! it reads a stable write's data, which nothing writes until the peer has applied
//! the write, through a `&[u8]` that lives while it seals one record
//! (`Region::stable_bytes`, an `unsafe fn` whose caller answers for that promise).
//! And one plain write: on `shm`, the owner's writes into an in-place area (smc's
//! slots and arena) are a `memcpy` into its own mapping (`Region::write_in_place`),
//! which that area's publishing and freeing counters order against every other
//! access of this process.

use crate::sync::atomic::{fence, AtomicU64, Ordering};
use thiserror::Error;

/// Bytes in a region word.
pub const WORD: usize = 8;
/// Regions are allocated in whole pages.
pub const PAGE: usize = 4096;

/// A byte range that does not fit a region, or is not word-aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("range {offset}+{len} is not a word-aligned range inside a region of {region_len} bytes")]
pub struct RangeError {
    /// Requested start, in bytes.
    pub offset: u64,
    /// Requested length, in bytes.
    pub len: u64,
    /// Size of the region, in bytes.
    pub region_len: u64,
}

/// The memory under a region's range could not be reserved ([`Region::reserve`]):
/// its file system (`/dev/shm`) is full or smaller than the group needs, or memory
/// ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("cannot reserve {len} bytes of shared memory ({}): /dev/shm is full or too small for this group; \
make it larger (`mount -o remount,size=... /dev/shm`, `docker run --shm-size=...`) or give the subgroups smaller windows", os_error(*errno))]
pub struct ReserveError {
    /// Bytes asked for.
    pub len: usize,
    /// The kernel's error number (`EFAULT`: no room; `ENOMEM`: out of memory).
    pub errno: Option<i32>,
}

fn os_error(errno: Option<i32>) -> String {
    match errno {
        // What `MADV_POPULATE_WRITE` says where a write would have raised SIGBUS.
        Some(libc::EFAULT) => "no room left".into(),
        Some(libc::ENOMEM) => "out of memory".into(),
        Some(e) => std::io::Error::from_raw_os_error(e).to_string(),
        None => "no error number".into(),
    }
}

#[cfg(not(loom))]
pub(crate) use segment::Segment;

#[cfg(not(loom))]
mod segment {
    use crate::sync::atomic::{AtomicU32, AtomicU64};
    use std::ptr::NonNull;

    /// Keeps the mapping alive (it is unmapped on drop).
    struct Backing(#[allow(dead_code)] memmap2::MmapMut);

    /// Page-aligned, zero-initialised memory that peers write into: a private
    /// anonymous mapping (`mem`, `tcp`) or a shared file mapping (`shm` transport).
    pub(crate) struct Segment {
        ptr: NonNull<u8>,
        len: usize,
        /// A shared file mapping (`shm`): its pages come from a file system that
        /// can be full (see [`super::Region::reserve`]).
        file: bool,
        _backing: Backing,
    }

    // SAFETY: the segment is plain memory that is accessed through atomic operations
    // (see `words` and `u32_at`), and otherwise only by `Region::write_in_place`'s
    // plain copies, which the caller's protocol orders against every other access
    // of this process, so sharing it between threads is sound.
    unsafe impl Send for Segment {}
    // SAFETY: as above: every access is atomic.
    unsafe impl Sync for Segment {}

    impl std::fmt::Debug for Segment {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Segment").field("len", &self.len).finish()
        }
    }

    impl Segment {
        /// Maps `len` zeroed bytes (rounded up to whole pages) of private anonymous
        /// memory. Pages are zero-filled by the kernel on first touch, so a large region
        /// of which little is used (an smc arena) costs only what is used; an aligned
        /// `alloc_zeroed` would have written every byte at once.
        pub(crate) fn heap(len: usize) -> Segment {
            let len = super::round_up(len.max(1), super::PAGE);
            let map = memmap2::MmapMut::map_anon(len)
                .unwrap_or_else(|e| panic!("cannot map {len} bytes of anonymous memory: {e}"));
            Segment { file: false, ..Segment::mapped(map) }
        }

        /// Wraps a shared file mapping. The mapping is page-aligned by construction.
        pub(crate) fn mapped(mut map: memmap2::MmapMut) -> Segment {
            let len = map.len();
            let ptr = NonNull::new(map.as_mut_ptr()).expect("mmap returned null");
            Segment { ptr, len, file: true, _backing: Backing(map) }
        }

        /// Whether this is a shared file mapping (`shm`), which peers reach through
        /// mappings of their own.
        pub(crate) fn is_file(&self) -> bool {
            self.file
        }

        /// Allocates the file pages under `[byte_off, byte_off + len)` (whole pages
        /// around it) without writing them: a no-op for anonymous memory, and where
        /// the kernel cannot do it (before Linux 5.14). `Err` with the kernel's error
        /// otherwise: `EFAULT` when the file system has no room (a write there would
        /// have raised `SIGBUS`), `ENOMEM` when memory ran out.
        pub(crate) fn populate(&self, byte_off: usize, len: usize) -> Result<(), super::ReserveError> {
            let end = byte_off.checked_add(len).filter(|e| *e <= self.len);
            assert!(end.is_some(), "segment range out of bounds");
            if !self.file || len == 0 {
                return Ok(());
            }
            // SAFETY: sysconf has no memory effects.
            let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(super::PAGE).max(1);
            let start = byte_off / page * page;
            let n = (byte_off + len - start).min(self.len - start);
            // SAFETY: `[start, start + n)` lies inside this live mapping (the base is
            // page-aligned and `start` a multiple of the page size). Populating for
            // write allocates the pages as a first write would and leaves their
            // contents as they are, so no access of ours or a peer's can tell.
            let r = unsafe { libc::madvise(self.ptr.as_ptr().add(start).cast(), n, libc::MADV_POPULATE_WRITE) };
            if r == 0 {
                return Ok(());
            }
            match std::io::Error::last_os_error().raw_os_error() {
                // A kernel without the advice: pages are allocated on first write, as before.
                Some(libc::EINVAL) => Ok(()),
                errno => Err(super::ReserveError { len, errno }),
            }
        }

        pub(crate) fn len(&self) -> usize {
            self.len
        }

        /// The words `[byte_off, byte_off + 8 * n)` as atomics.
        ///
        /// Panics if the range is outside the segment or not word-aligned.
        pub(crate) fn words(&self, byte_off: usize, n: usize) -> &[AtomicU64] {
            assert!(byte_off % super::WORD == 0, "unaligned segment offset {byte_off}");
            let end = n.checked_mul(super::WORD).and_then(|b| b.checked_add(byte_off));
            assert!(end.is_some_and(|e| e <= self.len), "segment range out of bounds");
            // SAFETY: the range is inside the allocation and 8-byte aligned (the base is
            // page-aligned, the offset a multiple of 8). `AtomicU64` has the size and
            // alignment of `u64`, and the memory is accessed atomically (by this
            // process through these references, by peers through their own
            // mappings), but for `Region::write_in_place`'s plain copies, which no
            // atomic access of this process overlaps, so a shared slice of atomics
            // over it is sound for the segment's lifetime, which bounds the borrow.
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(byte_off).cast::<AtomicU64>(), n) }
        }

        /// The 32-bit word at `byte_off`, for futexes.
        ///
        /// Panics if outside the segment or not 4-byte aligned.
        pub(crate) fn u32_at(&self, byte_off: usize) -> &AtomicU32 {
            assert!(byte_off % 4 == 0 && byte_off + 4 <= self.len, "bad u32 offset {byte_off}");
            // SAFETY: in bounds and 4-byte aligned (page-aligned base); accessed only
            // atomically, and never also as part of an `AtomicU64` (callers reserve the
            // surrounding word for this use).
            unsafe { &*self.ptr.as_ptr().add(byte_off).cast::<AtomicU32>() }
        }
    }
}

#[cfg_attr(loom, allow(dead_code))]
pub(crate) fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// A registered byte region: the unit a transport writes into.
///
/// The SST table is one region; Tailwind's log buffers will be others. Cloning the
/// `Arc` that holds it is cheap; the memory lives as long as any holder.
pub struct Region {
    /// Keeps the memory behind `ptr` alive.
    #[cfg(not(loom))]
    _seg: crate::sync::Arc<Segment>,
    /// The first word, checked once when the region was made.
    #[cfg(not(loom))]
    ptr: std::ptr::NonNull<AtomicU64>,
    /// Where the region starts in its segment.
    #[cfg(not(loom))]
    base: usize,
    #[cfg(loom)]
    mem: Box<[AtomicU64]>,
    len_words: usize,
}

// SAFETY: `ptr` points into the segment that `_seg` keeps alive, and that memory is
// accessed through atomics (and by `write_in_place`'s plain copies, ordered against
// every other access: see there), so the region may move to and be shared by threads.
#[cfg(not(loom))]
unsafe impl Send for Region {}
// SAFETY: as above.
#[cfg(not(loom))]
unsafe impl Sync for Region {}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region").field("len", &self.len()).finish()
    }
}

impl Region {
    /// A zeroed heap region of at least `len` bytes (rounded up to a whole word).
    pub fn new(len: usize) -> Region {
        let len_words = len.div_ceil(WORD);
        #[cfg(not(loom))]
        {
            Region::in_segment(crate::sync::Arc::new(Segment::heap(len_words * WORD)), 0, len_words * WORD)
        }
        #[cfg(loom)]
        {
            Region { mem: (0..len_words).map(|_| AtomicU64::new(0)).collect(), len_words }
        }
    }

    /// A region over `[base, base + len)` of `seg`.
    #[cfg(not(loom))]
    pub(crate) fn in_segment(seg: crate::sync::Arc<Segment>, base: usize, len: usize) -> Region {
        assert!(base % PAGE == 0 && len % WORD == 0 && base + len <= seg.len());
        // `Segment::words` checks bounds and alignment once, here.
        let ptr = std::ptr::NonNull::from(seg.words(base, len / WORD)).cast::<AtomicU64>();
        Region { _seg: seg, ptr, base, len_words: len / WORD }
    }

    /// Makes sure the memory under `[offset, offset + len)` exists now, where the
    /// region lies in a file that peers map (`shm`: a file in `/dev/shm`). Such a
    /// file is sparse: its pages are allocated at their first write, and a write
    /// that finds the file system full is killed by `SIGBUS`. A node reserves a
    /// range before it first writes there (its rows' counters at setup, a sender's
    /// ring and arena as its sends reach them), so a full `/dev/shm` is an error it
    /// can report instead. Free for memory of its own (`mem`, `tcp`) and on
    /// kernels before Linux 5.14, where nothing is reserved.
    ///
    /// Panics if the range is outside the region.
    pub fn reserve(&self, offset: usize, len: usize) -> Result<(), ReserveError> {
        let end = offset.checked_add(len).filter(|e| *e <= self.len());
        assert!(end.is_some(), "reserve of {len} bytes at {offset} outside a region of {}", self.len());
        #[cfg(not(loom))]
        {
            self._seg.populate(self.base + offset, len)
        }
        #[cfg(loom)]
        {
            Ok(())
        }
    }

    #[inline]
    fn words(&self) -> &[AtomicU64] {
        #[cfg(not(loom))]
        {
            // SAFETY: `ptr` and `len_words` describe a range that `Segment::words`
            // validated (in bounds, aligned) when the region was made; `_seg` keeps the
            // memory alive as long as `self`, which bounds the borrow; access to it is
            // atomic, but for `write_in_place`'s plain copies, which no atomic access
            // of this process overlaps (see there).
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len_words) }
        }
        #[cfg(loom)]
        {
            &self.mem
        }
    }

    /// The address of the first byte, for registering the region with a device
    /// (the `rdma` transport). Never dereferenced as a byte slice.
    #[cfg(all(not(loom), feature = "rdma"))]
    pub(crate) fn base_addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len_words * WORD
    }

    /// True for a zero-sized region.
    pub fn is_empty(&self) -> bool {
        self.len_words == 0
    }

    /// Checks that `[offset, offset + len)` is word-aligned and inside the region.
    /// Every offset that came from the network passes through here first.
    pub fn check_range(&self, offset: u64, len: u64) -> Result<(), RangeError> {
        let err = RangeError { offset, len, region_len: self.len() as u64 };
        let aligned = offset % WORD as u64 == 0 && len % WORD as u64 == 0;
        match offset.checked_add(len) {
            Some(end) if aligned && end <= self.len() as u64 => Ok(()),
            _ => Err(err),
        }
    }

    #[inline]
    fn word(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset % WORD == 0, "unaligned region offset {offset}");
        &self.words()[offset / WORD]
    }

    /// Loads the word at byte `offset`. Poll a publishing word with `Acquire`.
    #[inline]
    pub fn load(&self, offset: usize, order: Ordering) -> u64 {
        self.word(offset).load(order)
    }

    /// Stores the word at byte `offset`. Publish with `Release`.
    #[inline]
    pub fn store(&self, offset: usize, value: u64, order: Ordering) {
        self.word(offset).store(value, order)
    }

    /// Raises the word at `offset` to at least `value`; returns the previous value.
    #[inline]
    pub fn fetch_max(&self, offset: usize, value: u64, order: Ordering) -> u64 {
        self.word(offset).fetch_max(value, order)
    }

    /// Loads words starting at `offset` into `dst` with `order`, with one bounds
    /// check for all of them.
    #[inline]
    fn load_each(&self, offset: usize, dst: &mut [u64], order: Ordering) {
        let words = &self.words()[offset / WORD..offset / WORD + dst.len()];
        for (d, w) in dst.iter_mut().zip(words) {
            *d = w.load(order);
        }
    }

    /// Loads words starting at `offset` into `dst` (`Acquire`, as [`Region::load`]
    /// with it word by word), with one bounds check.
    #[inline]
    pub fn load_words(&self, offset: usize, dst: &mut [u64]) {
        self.load_each(offset, dst, Ordering::Acquire)
    }

    /// Copies words starting at `offset` into `dst` (`Relaxed` loads).
    pub fn read_words(&self, offset: usize, dst: &mut [u64]) {
        self.load_each(offset, dst, Ordering::Relaxed)
    }

    /// Stores `src` at `offset` (`Relaxed`), with one bounds check for all of them.
    #[inline]
    pub fn store_words(&self, offset: usize, src: &[u64]) {
        let words = &self.words()[offset / WORD..offset / WORD + src.len()];
        for (w, s) in words.iter().zip(src) {
            w.store(*s, Ordering::Relaxed);
        }
    }

    /// Writes `src` at `offset` as one landed one-sided write: a `Release` fence, then
    /// `Relaxed` stores ([`Region::store_words`]). A reader that `Acquire`-loads any
    /// word of this write sees every earlier write from the same writer in full.
    pub fn apply_write(&self, offset: usize, src: &[u64]) {
        fence(Ordering::Release);
        self.store_words(offset, src);
    }

    /// Applies little-endian `bytes` (a multiple of 8 long) at `offset` as one landed
    /// write, like [`Region::apply_write`]. The tcp receiver uses it on frame payloads.
    pub fn apply_write_bytes(&self, offset: usize, bytes: &[u8]) {
        fence(Ordering::Release);
        let n = bytes.len() / WORD;
        crate::words::store(&bytes[..n * WORD], &self.words()[offset / WORD..offset / WORD + n]);
    }

    /// Receives what the socket `fd` holds, up to `len` bytes, straight into
    /// `[offset, offset + len)` without blocking: the tcp receiver's path for the data
    /// of a large write, which the kernel copies in as a NIC's DMA would (no frame
    /// buffer between). The range need not be word-aligned; one outside the region is
    /// an `InvalidInput` error. The caller applies the write as one landed write: a
    /// `Release` fence before its first byte, and nobody takes its bytes as valid
    /// before its last byte is in (what follows it on the link publishes it).
    #[cfg(not(loom))]
    pub(crate) fn recv_into(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        offset: usize,
        len: usize,
    ) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        if !offset.checked_add(len).is_some_and(|end| end <= self.len()) {
            return Err(std::io::ErrorKind::InvalidInput.into());
        }
        // SAFETY: `[offset, offset + len)` lies inside the region (checked above), so
        // the pointer and length describe memory that `_seg` keeps alive for the call.
        // No Rust reference to those bytes is formed: the kernel writes them outside
        // the language's memory model, as the rdma transport's NIC writes registered
        // memory, and every access from Rust stays atomic.
        let n = unsafe {
            let at = self.ptr.as_ptr().cast::<u8>().add(offset);
            libc::recv(fd.as_raw_fd(), at.cast(), len, libc::MSG_DONTWAIT)
        };
        if n < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// `[offset, offset + len)` (which must lie inside the region) as bytes, for a
    /// link's cipher to seal a stable write's data where it lies (see
    /// `transport::WriteOp::stable`): the one place a Rust reference to a region's
    /// bytes is formed other than through its atomics.
    ///
    /// # Safety
    /// Nothing may write the range while the slice lives, neither a thread of this
    /// process nor a peer's write landing in it. The writes made before are ordered
    /// before the call by the caller's synchronization (a stable write is posted after
    /// its data was published to the posting thread), so the slice races with none.
    #[cfg(not(loom))]
    pub(crate) unsafe fn stable_bytes(&self, offset: usize, len: usize) -> &[u8] {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len()), "stable bytes inside the region");
        // SAFETY: the range lies inside the region (checked above), which `_seg` keeps
        // alive as long as `self`, bounding the borrow; the caller promises that
        // nothing writes it while the borrow lives, so reading it as plain bytes
        // races with no atomic access.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<u8>().add(offset), len) }
    }

    /// An `iovec` over `[offset, offset + len)` (which must lie inside the region) for
    /// the kernel to read: the tcp sender's path for the data of a stable write (see
    /// `transport::WriteOp::stable`), sent with no copy of its own. No Rust
    /// reference to the bytes is formed; the pointer is only handed to the kernel.
    #[cfg(not(loom))]
    pub(crate) fn iovec(&self, offset: usize, len: usize) -> libc::iovec {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len()), "an iovec inside the region");
        let at = self.ptr.as_ptr().cast::<u8>().wrapping_add(offset);
        libc::iovec { iov_base: at.cast(), iov_len: len }
    }

    /// Appends `len` bytes from `offset` to `out` as little-endian words (`Relaxed`
    /// loads): the tcp sender's copy of a write's source range. The words are loaded
    /// straight into `out`'s spare room, with no zero-fill first (a large write's
    /// zero-fill took as long as its copy).
    pub fn append_to(&self, offset: usize, len: usize, out: &mut Vec<u8>) {
        let words = &self.words()[offset / WORD..(offset + len) / WORD];
        let n = words.len() * WORD;
        out.reserve(n);
        crate::words::load_uninit(words, &mut out.spare_capacity_mut()[..n]);
        // SAFETY: `load_uninit` wrote every one of the `n` bytes after `out`'s length
        // (its slices are of equal length), which `reserve` made room for.
        unsafe { out.set_len(out.len() + n) };
    }

    /// Copies `len` bytes from `self[src_off..]` into `dst[dst_off..]` as one landed
    /// write (see [`Region::apply_write`]). This is the `mem`/`shm` one-sided write.
    pub fn copy_to(&self, src_off: usize, dst: &Region, dst_off: usize, len: usize) {
        fence(Ordering::Release);
        let n = len / WORD;
        let src = &self.words()[src_off / WORD..src_off / WORD + n];
        crate::words::copy(src, &dst.words()[dst_off / WORD..dst_off / WORD + n]);
    }

    /// Stores `bytes` at `offset` packed little-endian into words (`Relaxed`); the tail
    /// of the last word is zero-filled.
    pub fn write_bytes(&self, offset: usize, bytes: &[u8]) {
        let words = &self.words()[offset / WORD..offset / WORD + bytes.len().div_ceil(WORD)];
        // Whole words first, then the zero-filled tail.
        let n = bytes.len() / WORD;
        let (whole, tail) = bytes.split_at(n * WORD);
        crate::words::store(whole, &words[..n]);
        if !tail.is_empty() {
            let mut b = [0u8; WORD];
            b[..tail.len()].copy_from_slice(tail);
            words[n].store(u64::from_le_bytes(b), Ordering::Relaxed);
        }
    }

    /// Writes `bytes` at `offset` as [`Region::write_bytes`] does, as a plain copy
    /// (the C library's `memcpy`, with stores of up to 32 bytes) where the region lies
    /// in a shared file mapping (`shm`): the write path of an in-place area (see
    /// `LayoutBuilder::bytes_in_place`). Word stores are what a far pair of cores waits
    /// on: a DDS sample copied into its slot word by word took two fifths of its
    /// writer's time, and a copy four times wider let the writer's store buffer hold
    /// four times the bytes in flight.
    ///
    /// Sound where the range is written by no other thread of this process and read
    /// by none while this call runs: every earlier access happens before it, every
    /// later one after it. An in-place area's contract gives that: a part is
    /// published by a counter (`Release`, read with `Acquire`) after it was written,
    /// and written again only once every reader is done with it, which the writer
    /// learns through counters it reads with `Acquire`. Only the owner's threads reach
    /// the range through this mapping; peers, in this process or another, read the
    /// file through mappings of their own, outside the language's model as a NIC's
    /// reads are, and see whole words at worst torn across a message (as with word
    /// stores). Elsewhere (`mem`, where peers share the mapping; `tcp`; loom) this is
    /// `write_bytes`.
    pub(crate) fn write_in_place(&self, offset: usize, bytes: &[u8]) {
        #[cfg(not(loom))]
        if self._seg.is_file() {
            let n = bytes.len() / WORD * WORD;
            assert!(offset % WORD == 0, "unaligned write at {offset}");
            assert!(offset.checked_add(bytes.len()).is_some_and(|end| end <= self.len()), "write outside the region");
            // SAFETY: `[offset, offset + n)` lies inside the region (checked above),
            // whose segment `_seg` keeps mapped for the call; `bytes` is a separate
            // borrow, so the ranges do not overlap. No reference to the destination is
            // formed. No other thread of this process accesses the range while the
            // copy runs (the contract above, which the caller's protocol orders with
            // `Release`/`Acquire` counters), so the plain stores race with no atomic
            // access; peers' accesses go through other mappings of the file.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.as_ptr().cast::<u8>().add(offset), n);
            }
            if n < bytes.len() {
                self.write_bytes(offset + n, &bytes[n..]);
            }
            return;
        }
        self.write_bytes(offset, bytes);
    }

    /// Loads `dst.len()` bytes from `offset` (`Relaxed`), the inverse of `write_bytes`.
    pub fn read_bytes(&self, offset: usize, dst: &mut [u8]) {
        let words = &self.words()[offset / WORD..offset / WORD + dst.len().div_ceil(WORD)];
        let n = dst.len() / WORD;
        let (whole, tail) = dst.split_at_mut(n * WORD);
        crate::words::load(&words[..n], whole);
        if !tail.is_empty() {
            let b = words[n].load(Ordering::Relaxed).to_le_bytes();
            tail.copy_from_slice(&b[..tail.len()]);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
