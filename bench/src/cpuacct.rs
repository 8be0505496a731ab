//! Where the CPUs went during a run: the machine's busy time (/proc/stat)
//! and the demo's own processes' CPU time (/proc/<pid>/stat), so a report
//! shows how much background load shared the machine and how much CPU each
//! request really cost (its demand plus HTTP, scheduling and kernel overhead).

use serde::Serialize;

/// Cumulative counters at one instant: the machine's busy time in clock ticks (/proc/stat
/// has nothing finer), the demo's CPU time in nanoseconds.
#[derive(Clone, Debug, Default)]
pub struct CpuSnapshot {
    machine_busy: u64,
    demo_ns: u64,
    wall_ns: u64,
}

/// CPU use between two snapshots.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CpuUsage {
    /// CPUs' worth of time the demo's processes (tiers, generator, agent) used on average.
    pub demo_cpus: f64,
    /// CPUs' worth used by everything else on the machine (other builds, daemons).
    pub background_cpus: f64,
    /// The demo's CPU time per request, µs (demand + every overhead).
    pub cpu_per_request_us: f64,
}

pub fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Busy ticks over all CPUs from the first line of /proc/stat.
fn machine_busy_ticks() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = text.lines().next()?.split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user); busy = all but idle and iowait.
    let get = |i: usize| fields.get(i).copied().unwrap_or(0);
    Some(get(0) + get(1) + get(2) + get(5) + get(6) + get(7))
}

/// utime + stime of a process (all its threads, live and exited), ticks. Sampled at the
/// timer tick: a process's short bursts are charged or not by chance, so a few hundred
/// milliseconds of CPU in bursts of a millisecond read ±20%. [`process_cpu_ns`] is exact.
pub fn process_ticks(pid: u32) -> u64 {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0 };
    // The command name is in parentheses and may contain spaces: split after the last ')'.
    let Some(rest) = text.rfind(')').map(|i| &text[i + 1..]) else { return 0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')' come state(3) ppid(4) … utime(14) stime(15): indices 11 and 12 here.
    let get = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    get(11) + get(12)
}

/// CPU time of a process (all its threads, live and exited), ns: the scheduler's own runtime
/// sum, read through the process's CPU-time clock. The demo's calibration took its overhead
/// per request from tick-sampled utime + stime of 400 requests and read anywhere from 350 to
/// 975 µs, which moved the offered rate by up to 19% between invocations. 0 when the process
/// is gone (as `process_ticks`).
pub fn process_cpu_ns(pid: u32) -> u64 {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return 0 };
    let mut clock: libc::clockid_t = 0;
    // SAFETY: clock_getcpuclockid writes one clockid_t to the pointer we own.
    if unsafe { libc::clock_getcpuclockid(pid, &mut clock) } != 0 {
        return 0;
    }
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec to the pointer we own.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time of `pid` and every process below it, ns (nginx with several workers does its
/// work in children of the process we started).
pub fn tree_cpu_ns(pid: u32) -> u64 {
    with_descendants(&[pid]).iter().map(|&p| process_cpu_ns(p)).sum()
}

/// Counters now; `pids` are the demo's processes besides this one, counted with every
/// process they started (a pre-forking server's workers do the work; its parent only waits).
pub fn snapshot(pids: &[u32]) -> CpuSnapshot {
    let machine_busy = machine_busy_ticks().unwrap_or(0);
    let demo_ns = process_cpu_ns(std::process::id()) + pids.iter().map(|&p| tree_cpu_ns(p)).sum::<u64>();
    CpuSnapshot { machine_busy, demo_ns, wall_ns: crate::clock::monotonic_ns() }
}

/// [`snapshot`] for a caller that has just read the demo's CPU time itself (`demo_ns`: this
/// process's and its processes' trees', as [`snapshot`] adds them up), process by process.
pub fn snapshot_with(demo_ns: u64) -> CpuSnapshot {
    let machine_busy = machine_busy_ticks().unwrap_or(0);
    CpuSnapshot { machine_busy, demo_ns, wall_ns: crate::clock::monotonic_ns() }
}

/// Every process below `pid` (children, their children, ...), from each thread's
/// `/proc/<pid>/task/<tid>/children`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else { continue };
        for task in tasks.flatten() {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()) {
                found.push(child);
                todo.push(child);
            }
        }
    }
    found
}

/// `roots` and every live process below them.
pub fn with_descendants(roots: &[u32]) -> Vec<u32> {
    roots.iter().flat_map(|&r| std::iter::once(r).chain(descendants(r))).collect()
}

/// Usage between `before` and `after` for `requests` requests.
pub fn usage(before: &CpuSnapshot, after: &CpuSnapshot, requests: usize) -> CpuUsage {
    let hz = ticks_per_sec();
    let wall = (after.wall_ns.saturating_sub(before.wall_ns)) as f64 / 1e9;
    if wall <= 0.0 {
        return CpuUsage::default();
    }
    let demo_s = after.demo_ns.saturating_sub(before.demo_ns) as f64 / 1e9;
    let busy_s = after.machine_busy.saturating_sub(before.machine_busy) as f64 / hz;
    CpuUsage {
        demo_cpus: demo_s / wall,
        background_cpus: ((busy_s - demo_s) / wall).max(0.0),
        cpu_per_request_us: if requests > 0 { demo_s * 1e6 / requests as f64 } else { 0.0 },
    }
}
