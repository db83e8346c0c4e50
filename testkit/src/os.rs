//! What the harness asks of the OS: Ctrl-C as a flag, dying with the parent, CPU
//! clocks. All through safe wrappers (`signal-hook`, `nix`).

use spindle_sst::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

fn flag() -> &'static Arc<AtomicBool> {
    static INTERRUPTED: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    INTERRUPTED.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// Installs SIGINT and SIGTERM handlers that set a flag (see [`interrupted`]), so a
/// parent can kill its children and remove their files before it exits.
pub fn catch_interrupts() {
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // Registration fails only for signals that cannot be caught (not these two).
        let _ = signal_hook::flag::register(sig, Arc::clone(flag()));
    }
}

/// True once SIGINT or SIGTERM arrived after [`catch_interrupts`].
pub fn interrupted() -> bool {
    flag().load(Ordering::Relaxed)
}

/// In a child: ask the kernel to SIGKILL this process when its parent dies, so a
/// parent killed with -9 leaves no orphans behind.
pub fn die_with_parent() {
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
}

/// Whose CPU time [`cpu_time`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuClock {
    /// The calling thread (a `mem` node is one thread of a shared process).
    Thread,
    /// The whole process (an `shm` or `tcp` node is a process).
    Process,
}

/// CPU time (user + system) used so far by the calling thread or this process, with
/// nanosecond resolution; zero if the clock cannot be read.
pub fn cpu_time(clock: CpuClock) -> Duration {
    use nix::time::{clock_gettime, ClockId};
    let id = match clock {
        CpuClock::Thread => ClockId::CLOCK_THREAD_CPUTIME_ID,
        CpuClock::Process => ClockId::CLOCK_PROCESS_CPUTIME_ID,
    };
    clock_gettime(id).map(Duration::from).unwrap_or(Duration::ZERO)
}

/// Stops (SIGSTOP, `pause = true`) or continues (SIGCONT) process `pid`: a stalled
/// member, as a debugger or a frozen container makes one.
pub fn pause_process(pid: u32, pause: bool) -> Result<(), String> {
    use nix::sys::signal::{kill, Signal};
    let sig = if pause { Signal::SIGSTOP } else { Signal::SIGCONT };
    kill(nix::unistd::Pid::from_raw(pid as i32), sig).map_err(|e| format!("{sig} to {pid}: {e}"))
}
