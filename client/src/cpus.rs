//! CPU lists written as `taskset -c` and systemd's `CPUAffinity=` write
//! them (`0`, `0,2`, `4-7`), and pinning the calling thread to one.
//!
//! Used to keep a thread the device wakes (gpupmd's interrupt and commit
//! threads) on the CPUs the device's wake-ups come from: on the virtual
//! machines measured (docs/performance.md), a futex wake-up whose waker
//! runs on another CPU cost the woken thread 14–19 µs of CPU time, against
//! about 4 µs on the same CPU — at 1,000 commits a second, the larger part
//! of the daemon's budget.

use std::fmt;
use std::str::FromStr;

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

/// A non-empty set of CPU numbers, ascending, each below
/// [`CpuSet::count`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList(Vec<usize>);

/// Why a CPU list was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    /// Nothing listed.
    #[error("the CPU list is empty")]
    Empty,
    /// An item is neither a number nor a range `A-B`.
    #[error("{0:?} is not a CPU number or range (write a list like 0,2-3)")]
    Syntax(String),
    /// A range whose end is below its start.
    #[error("the range {0}-{1} runs backwards")]
    Backwards(usize, usize),
    /// A CPU number no CPU set of this system can hold.
    #[error("CPU {cpu} is past the largest CPU number this system supports ({max})")]
    TooLarge {
        /// The number given.
        cpu: usize,
        /// The largest number there can be.
        max: usize,
    },
}

/// Why this process cannot use a CPU list.
#[derive(Debug, thiserror::Error)]
pub enum UnusableCpus {
    /// CPUs it may not run on.
    #[error("CPU {0} is offline or outside this process's affinity (CPUAffinity=, taskset)")]
    NotAllowed(CpuList),
    /// Its affinity could not be read.
    #[error("cannot read this process's CPU affinity")]
    Affinity(#[source] nix::Error),
}

impl FromStr for CpuList {
    type Err = CpuListError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let limit = CpuSet::count();
        let number = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| CpuListError::Syntax(t.trim().to_owned()))
        };
        let mut cpus = Vec::new();
        for item in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (first, last) = match item.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                None => {
                    let n = number(item)?;
                    (n, n)
                }
            };
            if last < first {
                return Err(CpuListError::Backwards(first, last));
            }
            if last >= limit {
                return Err(CpuListError::TooLarge {
                    cpu: last,
                    max: limit - 1,
                });
            }
            cpus.extend(first..=last);
        }
        cpus.sort_unstable();
        cpus.dedup();
        if cpus.is_empty() {
            return Err(CpuListError::Empty);
        }
        Ok(CpuList(cpus))
    }
}

impl fmt::Display for CpuList {
    /// Ranges of consecutive CPUs folded: `0-3,6`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0.iter().copied().peekable();
        let mut first = true;
        while let Some(start) = rest.next() {
            let mut end = start;
            while rest.peek() == Some(&(end + 1)) {
                end += 1;
                rest.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if end == start {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

impl CpuList {
    /// The CPU numbers, ascending.
    pub fn cpus(&self) -> &[usize] {
        &self.0
    }

    /// Whether this process may run on every listed CPU: those offline, or
    /// outside the affinity it was started with (systemd's `CPUAffinity=`,
    /// `taskset`), are named.
    pub fn check_usable(&self) -> Result<(), UnusableCpus> {
        let allowed = sched_getaffinity(Pid::from_raw(0)).map_err(UnusableCpus::Affinity)?;
        let refused: Vec<usize> = self
            .0
            .iter()
            .copied()
            .filter(|&c| !allowed.is_set(c).unwrap_or(false))
            .collect();
        if refused.is_empty() {
            Ok(())
        } else {
            Err(UnusableCpus::NotAllowed(CpuList(refused)))
        }
    }

    /// Restricts the calling thread (not the process) to these CPUs.
    pub fn pin_current_thread(&self) -> nix::Result<()> {
        let mut set = CpuSet::new();
        for &c in &self.0 {
            set.set(c)?;
        }
        // Pid 0 is the calling thread for sched_setaffinity(2).
        sched_setaffinity(Pid::from_raw(0), &set)
    }
}

/// The CPUs the calling thread may run on now (never none: a thread runs
/// somewhere).
pub fn current_thread_cpus() -> nix::Result<CpuList> {
    let set = sched_getaffinity(Pid::from_raw(0))?;
    Ok(CpuList(
        (0..CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(s: &str) -> Result<Vec<usize>, CpuListError> {
        s.parse::<CpuList>().map(|l| l.cpus().to_vec())
    }

    #[test]
    fn lists_parse_as_taskset_writes_them() {
        assert_eq!(list("0"), Ok(vec![0]));
        assert_eq!(list("3,1"), Ok(vec![1, 3]));
        assert_eq!(list(" 0-2, 2 ,7"), Ok(vec![0, 1, 2, 7]));
        assert_eq!(list("5-5"), Ok(vec![5]));
    }

    #[test]
    fn bad_lists_are_refused_with_the_reason() {
        assert_eq!(list(""), Err(CpuListError::Empty));
        assert_eq!(list(" , "), Err(CpuListError::Empty));
        assert_eq!(list("x"), Err(CpuListError::Syntax("x".into())));
        assert_eq!(list("1-"), Err(CpuListError::Syntax(String::new())));
        assert_eq!(list("-1"), Err(CpuListError::Syntax(String::new())));
        assert_eq!(list("3-1"), Err(CpuListError::Backwards(3, 1)));
        let max = CpuSet::count() - 1;
        assert_eq!(
            list(&format!("0,{}", max + 1)),
            Err(CpuListError::TooLarge { cpu: max + 1, max })
        );
        assert!(list(&max.to_string()).is_ok());
    }

    #[test]
    fn display_folds_ranges_and_parses_back() {
        for (text, shown) in [
            ("0", "0"),
            ("0,1,2,5", "0-2,5"),
            ("7,3-4,9-10", "3-4,7,9-10"),
        ] {
            let l: CpuList = text.parse().unwrap();
            assert_eq!(l.to_string(), shown);
            assert_eq!(shown.parse::<CpuList>().unwrap(), l);
        }
    }

    #[test]
    fn pinning_restricts_only_the_calling_thread() {
        let before = current_thread_cpus().unwrap();
        let target: CpuList = before.cpus()[0].to_string().parse().unwrap();
        let pinned = std::thread::spawn(move || {
            target.pin_current_thread().unwrap();
            current_thread_cpus().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(pinned.cpus(), [before.cpus()[0]]);
        assert_eq!(
            current_thread_cpus().unwrap(),
            before,
            "this thread is untouched"
        );
    }

    #[test]
    fn cpus_outside_the_process_affinity_are_named() {
        let max = CpuSet::count() - 1;
        let allowed = current_thread_cpus().unwrap();
        let l: CpuList = format!("{},{max}", allowed.cpus()[0]).parse().unwrap();
        // The largest possible CPU number is not a CPU of a test machine.
        match l.check_usable() {
            Err(UnusableCpus::NotAllowed(refused)) => assert_eq!(refused.cpus(), [max]),
            other => panic!("{other:?}"),
        }
        let ours: CpuList = allowed.cpus()[0].to_string().parse().unwrap();
        assert!(ours.check_usable().is_ok());
    }
}
