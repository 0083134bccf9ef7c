//! What the benchmarks read of a process from `/proc`: its CPU time and
//! its resident memory.

use std::time::Duration;

/// A process's CPU time (user + system), from `/proc/PID/stat`.
#[allow(unsafe_code, reason = "std has no call for the clock tick rate")]
pub fn process_cpu(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which may hold spaces: utime and
    // stime are the 12th and 13th of them.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    Some(Duration::from_millis((utime + stime) * 1000 / ticks.max(1)))
}

/// A process's resident set in bytes, from `VmRSS` in `/proc/PID/status`.
pub fn process_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let me = std::process::id();
        assert!(process_cpu(me).is_some());
        assert!(process_rss(me).is_some_and(|b| b > 0));
        assert_eq!(process_rss(u32::MAX), None);
    }
}
