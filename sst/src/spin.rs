//! The predicate thread's spin budget chosen from the host. Spinning after the last
//! work saves a wake-up per message while each process's predicate thread has a
//! core of its own; once the processes that spin on a host outnumber its cores,
//! their spinning takes the cores the others need. On this project's 2-core test
//! machine, three members: the Group runtime at 1 KB on shm did 1.0 M msgs/s
//! spinning 100 µs and 2.6 M not spinning, raw smc 0.78 M and 1.74 M, Tailwind over
//! tcp 4.1 K appends/s and 16-19 K (docs/benchmarks.md). Two members keep the
//! budget, so their 16 B round trips are what they were.

use crate::predicate::DEFAULT_SPIN_US;

/// The budget for `here` spinning processes on a host of `cores` cores, in µs: the
/// default while each has a core, none once they outnumber the cores.
pub fn auto_spin_us(here: usize, cores: usize) -> u64 {
    if here <= cores.max(1) {
        DEFAULT_SPIN_US
    } else {
        0
    }
}

/// This host's cores (1 if the OS does not say).
pub fn host_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_spin_while_each_has_a_core() {
        assert_eq!(auto_spin_us(1, 2), DEFAULT_SPIN_US);
        assert_eq!(auto_spin_us(2, 2), DEFAULT_SPIN_US);
        assert_eq!(auto_spin_us(3, 2), 0, "three on two cores do not spin");
        assert_eq!(auto_spin_us(1, 0), DEFAULT_SPIN_US, "an unknown core count counts as one");
        assert!(host_cores() >= 1);
    }
}
