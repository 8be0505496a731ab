//! Per-thread facts from `/proc/PID/task/TID/`: `stat` (name, state, last CPU, scheduling
//! policy), `schedstat` (CPU time, run-queue delay, time slices) and the allowed CPUs.

use crate::cpulist::{parse_list, CpuSet};
use crate::root::SysRoot;

/// The fields of `/proc/PID/task/TID/stat` the checks use.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskStat {
    pub comm: String,
    /// R, S, D, ...
    pub state: char,
    pub ppid: u32,
    /// The CPU it last ran on.
    pub processor: u32,
    pub rt_priority: u32,
    /// SCHED_OTHER 0, FIFO 1, RR 2, BATCH 3, IDLE 5, DEADLINE 6.
    pub policy: u32,
    pub nice: i32,
}

/// Parses a `stat` line. The name is in parentheses and may hold spaces or `)`, so the fields
/// are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<TaskStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3 (state); field N is rest[N - 3].
    let field = |n: usize| rest.get(n - 3).copied();
    Some(TaskStat {
        comm,
        state: field(3)?.chars().next()?,
        ppid: field(4)?.parse().ok()?,
        nice: field(19)?.parse().ok()?,
        processor: field(39)?.parse().ok()?,
        rt_priority: field(40)?.parse().ok()?,
        policy: field(41)?.parse().ok()?,
    })
}

/// `policy` of SCHED_IDLE threads.
pub const SCHED_IDLE: u32 = 5;

/// The name of a scheduling policy number.
pub fn policy_name(policy: u32) -> &'static str {
    match policy {
        0 => "SCHED_OTHER",
        1 => "SCHED_FIFO",
        2 => "SCHED_RR",
        3 => "SCHED_BATCH",
        5 => "SCHED_IDLE",
        6 => "SCHED_DEADLINE",
        _ => "unknown",
    }
}

/// Whether the policy is CFS/EEVDF-fair (time-sliced), not a FIFO-ordered class.
pub fn is_fair_class(policy: u32) -> bool {
    matches!(policy, 0 | 3 | 5)
}

/// `/proc/PID/task/TID/schedstat`: ns on the CPU, ns runnable but waiting, time slices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedStat {
    pub cpu_ns: u64,
    pub run_delay_ns: u64,
    pub slices: u64,
}

pub fn parse_schedstat(text: &str) -> Option<SchedStat> {
    let mut it = text.split_whitespace().map(|f| f.parse::<u64>().ok());
    Some(SchedStat { cpu_ns: it.next()??, run_delay_ns: it.next()??, slices: it.next()?? })
}

/// One thread as read at one instant.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskSample {
    pub pid: u32,
    pub tid: u32,
    pub stat: TaskStat,
    pub sched: SchedStat,
}

/// Reads one thread; `None` when it has exited or cannot be read.
pub fn read_task(root: &SysRoot, pid: u32, tid: u32) -> Option<TaskSample> {
    let dir = format!("proc/{pid}/task/{tid}");
    let stat = parse_stat(&root.read(&format!("{dir}/stat")).ok()?)?;
    let sched = root.read(&format!("{dir}/schedstat")).ok().and_then(|s| parse_schedstat(&s)).unwrap_or_default();
    Some(TaskSample { pid, tid, stat, sched })
}

/// The CPUs a thread may run on (`Cpus_allowed_list` of its `status`).
pub fn allowed_cpus(root: &SysRoot, pid: u32, tid: u32) -> Option<CpuSet> {
    let status = root.read(&format!("proc/{pid}/task/{tid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Cpus_allowed_list:"))?;
    parse_list(line.split_once(':')?.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_spaces_and_parens_in_the_name() {
        let line = "42 (a) b (c)) R 1 42 42 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 1 0 100 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 7 1 0 0 0 0 0 0 0 0 0 0 0";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.comm, "a) b (c)");
        assert_eq!((s.state, s.ppid, s.nice, s.processor, s.rt_priority, s.policy), ('R', 1, 0, 1, 7, 1));
        assert_eq!(policy_name(s.policy), "SCHED_FIFO");
        assert!(parse_stat("garbage").is_none());
        assert_eq!(parse_schedstat("100 20 3\n"), Some(SchedStat { cpu_ns: 100, run_delay_ns: 20, slices: 3 }));
    }
}
