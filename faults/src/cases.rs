//! The faults, each on real processes: inject, then read the node back (every thread's
//! policy with `sched_getattr`, the table's slots, the service's own counters).

use std::path::Path;
use std::time::{Duration, Instant};

use tailor_runtime::cpu::monotonic_ns;
use tailor_runtime::kernel::sys::{self, ThreadPolicy};

use crate::node;
use crate::procs::{self, Proc, TablePath};

/// One fault's measurements (a line of the report).
#[derive(Clone, Debug, Default)]
pub struct Row {
    pub fault: &'static str,
    /// Fault → the service noticed (its fallback), or the harm was refused/reclaimed, ms.
    pub detect_ms: Option<f64>,
    /// Fault → no thread of the service at an RT priority or SCHED_IDLE (read back), ms.
    pub restore_ms: Option<f64>,
    /// Agent back (restart, SIGCONT) → the service re-attached, ms.
    pub reattach_ms: Option<f64>,
    /// Agent back → an older request served first again (ordering probe), ms.
    pub ordering_ms: Option<f64>,
    /// What was left changed once the fallback was in effect (must be empty).
    pub left: Vec<String>,
    /// Requests the service accepted, and of those the ones that never completed.
    pub admitted: u64,
    pub lost: u64,
    /// p99 latency of the requests that arrived in the fault's window, ms.
    pub p99_ms: Option<f64>,
    pub note: String,
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// What the service reported on stdout so far.
#[derive(Default)]
struct Observed {
    probes: Vec<(u64, String)>,
    reused: Option<i32>,
}

impl Observed {
    fn take(&mut self, svc: &Proc) {
        for line in svc.drain() {
            self.note(&line);
        }
    }

    fn note(&mut self, line: &str) {
        let mut f = line.split_whitespace();
        match (f.next(), f.next(), f.next()) {
            (Some("probe"), Some(t), Some(order)) => {
                self.probes.extend(t.parse::<u64>().ok().map(|t| (t, order.to_string())));
            }
            (Some(reused), _, _) if reused.starts_with("reused") => {
                self.reused = line.split("tid=").nth(1).and_then(|t| t.trim().parse().ok());
            }
            _ => {}
        }
    }

    /// The end of the first probe after `t0` that saw the older request served first.
    fn ordered_after(&self, t0: u64) -> Option<u64> {
        self.probes.iter().find(|(t, order)| *t >= t0 && order == "old-first").map(|(t, _)| *t)
    }
}

/// Polls (every 0.5 ms) until `done`; ms since `t0`, or `None` after `timeout`.
fn wait_until(t0: u64, timeout: Duration, mut done: impl FnMut() -> bool) -> Option<f64> {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return Some(ms(monotonic_ns() - t0));
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// The service's watchdog thread is at SCHED_FIFO: attached to an agent (it lowers
/// itself when it falls back and rises again when it re-attaches).
fn attached(svc: &Proc) -> bool {
    node::threads(svc.pid()).iter().any(|t| t.name == "tailor-watchdog" && t.policy.base() == libc::SCHED_FIFO)
}

/// Fault at `t0` → the service fell back (its watchdog lowered itself, read back) → no
/// thread of it at an RT priority or SCHED_IDLE: `detect_ms` and `restore_ms`.
fn wait_restored_detected(svc: &Proc, t0: u64, row: &mut Row) {
    row.detect_ms = wait_until(t0, Duration::from_secs(3), || !attached(svc));
    row.restore_ms = row.detect_ms.and_then(|_| wait_restored(svc, t0, Duration::from_secs(3)));
}

/// Polls the service's threads until none is at an RT priority or SCHED_IDLE; ms since `t0`.
fn wait_restored(svc: &Proc, t0: u64, timeout: Duration) -> Option<f64> {
    wait_until(t0, timeout, || node::raised_threads(svc.pid()).is_empty())
}

/// Watches the service for `window` (or until it re-attaches, when raising its I/O and pool
/// threads is right again): every thread found at an RT priority or SCHED_IDLE.
///
/// A look counts only if the service is still fallen back after it: a re-attach raises the
/// watchdog first and then the other threads, so a look that raced with one (reading a
/// thread the re-attach had just raised) is followed by the watchdog found at SCHED_FIFO.
fn left_raised(svc: &Proc, window: Duration, left: &mut Vec<String>) {
    let end = Instant::now() + window;
    while Instant::now() < end && !attached(svc) {
        let raised = node::raised_threads(svc.pid());
        if attached(svc) {
            break;
        }
        for t in raised {
            let d = t.describe();
            if !left.contains(&d) {
                left.push(d);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A process outside the GAT domain at SCHED_BATCH: nothing of ours may change it.
struct Bystander(std::process::Child);

impl Bystander {
    fn start() -> Bystander {
        let child = std::process::Command::new("sleep").arg("120").spawn().expect("start `sleep`");
        sys::set_policy(child.id() as i32, ThreadPolicy { policy: libc::SCHED_BATCH, priority: 0 })
            .expect("bystander to SCHED_BATCH");
        Bystander(child)
    }

    fn check(&self, left: &mut Vec<String>) {
        for t in node::threads(self.0.id()) {
            if t.policy.base() != libc::SCHED_BATCH {
                left.push(format!("bystander process {}: {}", self.0.id(), t.describe()));
            }
        }
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Stops the service and collects its counters: `(admitted, lost, latencies)`.
fn finish(mut svc: Proc, obs: &mut Observed, row: &mut Row) -> Vec<(u64, u64)> {
    svc.say("stop");
    let mut lat = Vec::new();
    let done = svc.until("done", Duration::from_secs(30), |line| {
        let mut f = line.split_whitespace();
        if let (Some("lat"), Some(a), Some(d)) = (f.next(), f.next(), f.next()) {
            if let (Ok(a), Ok(d)) = (a.parse(), d.parse()) {
                lat.push((a, d));
            }
        } else {
            obs.note(line);
        }
    });
    let Some(done) = done else {
        row.note.push_str(&format!(" service did not finish: {}", svc.stderr()));
        row.lost = u64::MAX;
        return lat;
    };
    let field = |name: &str| -> u64 {
        done.split_whitespace().find_map(|kv| kv.strip_prefix(&format!("{name}="))?.parse().ok()).unwrap_or(0)
    };
    row.admitted = field("submitted") - field("rejected");
    row.lost = row.admitted.saturating_sub(field("completed"));
    if field("errors") > 0 {
        row.note.push_str(&format!(" service errors={}", field("errors")));
    }
    lat
}

/// p99 of the requests that arrived in `[from, to]`, ms.
fn p99(lat: &[(u64, u64)], from: u64, to: u64) -> Option<f64> {
    let mut v: Vec<u64> = lat.iter().filter(|(a, _)| *a >= from && *a <= to).map(|(a, d)| d - a).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(ms(v[((v.len() as f64 * 0.99).ceil() as usize).clamp(1, v.len()) - 1]))
}

/// Runs the harness's measuring thread at SCHED_FIFO 44 (above everything it watches, the
/// agent at 43 included) while a case runs, so its polling times the node and not its own
/// scheduling delays on a busy machine; its policy is put back on drop.
pub struct MeasuringThread(ThreadPolicy);

impl MeasuringThread {
    pub fn raise() -> MeasuringThread {
        let before = sys::get_policy(0).unwrap_or(ThreadPolicy { policy: libc::SCHED_OTHER, priority: 0 });
        let _ = sys::set_policy(0, ThreadPolicy::fifo(tailor_runtime::kernel::AGENT_PRIORITY + 1));
        MeasuringThread(before)
    }
}

impl Drop for MeasuringThread {
    fn drop(&mut self) {
        let _ = sys::set_policy(0, self.0);
    }
}

/// The calling thread at SCHED_OTHER until dropped (then back to what it had).
struct NormalThread(ThreadPolicy);

impl NormalThread {
    fn lower() -> NormalThread {
        let before = sys::get_policy(0).unwrap_or(ThreadPolicy { policy: libc::SCHED_OTHER, priority: 0 });
        let _ = sys::set_policy(0, ThreadPolicy { policy: libc::SCHED_OTHER, priority: 0 });
        NormalThread(before)
    }
}

impl Drop for NormalThread {
    fn drop(&mut self) {
        let _ = sys::set_policy(0, self.0);
    }
}

/// The load every case runs: modest, so the 2-CPU CI machine is not saturated by it.
const LOAD: [&str; 4] = ["--rate", "300", "--work-us", "300"];

fn with_load<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    LOAD.iter().copied().chain(extra.iter().copied()).collect()
}

/// Waits until the service's pool has threads raised above the band (it is attached and
/// serving); the count.
fn serving(svc: &Proc) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n = node::raised_threads(svc.pid()).iter().filter(|t| t.name == "tailor-job").count();
        if n > 0 || Instant::now() >= deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `kill -9` of the agent while a service serves on its pool (the reported bug: pool
/// threads left at SCHED_FIFO 41).
pub fn agent_kill9(exe: &Path) -> Row {
    let mut row = Row { fault: "agent: kill -9", ..Default::default() };
    let t = TablePath::new("kill9");
    let by = Bystander::start();
    let agent = procs::agent(exe, &t.0, &[]);
    let svc = procs::service(exe, &t.0, &with_load(&[]));
    let raised = serving(&svc);
    std::thread::sleep(Duration::from_millis(200));
    let mut obs = Observed::default();
    obs.take(&svc);
    let t0 = monotonic_ns();
    drop(agent); // SIGKILL
    wait_restored_detected(&svc, t0, &mut row);
    left_raised(&svc, Duration::from_millis(300), &mut row.left);
    by.check(&mut row.left);
    let lat = finish(svc, &mut obs, &mut row);
    row.p99_ms = p99(&lat, t0, u64::MAX);
    row.note = format!("{raised} pool threads were raised before the kill{}", row.note);
    row
}

/// SIGSTOP of the agent (hung: its heartbeat stops, its process lives), then SIGCONT.
pub fn agent_sigstop(exe: &Path) -> Row {
    let mut row = Row { fault: "agent: SIGSTOP, then SIGCONT", ..Default::default() };
    let t = TablePath::new("stop");
    let by = Bystander::start();
    let agent = procs::agent(exe, &t.0, &[]);
    let svc = procs::service(exe, &t.0, &with_load(&["--probe", "true"]));
    serving(&svc);
    std::thread::sleep(Duration::from_millis(200));
    let mut obs = Observed::default();
    obs.take(&svc);
    let t0 = monotonic_ns();
    agent.signal(libc::SIGSTOP);
    wait_restored_detected(&svc, t0, &mut row);
    left_raised(&svc, Duration::from_millis(300), &mut row.left);
    by.check(&mut row.left);
    let t1 = monotonic_ns();
    agent.signal(libc::SIGCONT);
    wait_ordered(&svc, &mut obs, t1, &mut row);
    let lat = finish(svc, &mut obs, &mut row);
    row.p99_ms = p99(&lat, t0, t1 + row.ordering_ms.map_or(0, |m| (m * 1e6) as u64));
    row
}

/// Waits (≤ 5 s) for the service to re-attach and an older request to be served first again.
fn wait_ordered(svc: &Proc, obs: &mut Observed, t1: u64, row: &mut Row) {
    row.reattach_ms = wait_until(t1, Duration::from_secs(5), || attached(svc));
    let reattached = row.reattach_ms.map_or(u64::MAX, |m| t1 + (m * 1e6) as u64);
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && obs.ordered_after(reattached).is_none() {
        obs.take(svc);
        std::thread::sleep(Duration::from_millis(5));
    }
    row.ordering_ms = obs.ordered_after(reattached).map(|t| ms(t - t1));
}

/// The agent killed at random points while it rewrites levels (key-ordering shifts every
/// few hundred µs with 20 µs buckets) under many short jobs; restarted after each kill.
pub fn agent_killed_mid_write(exe: &Path, rounds: usize) -> Row {
    let mut row = Row { fault: "agent: kill -9 mid-write, ×N", ..Default::default() };
    let t = TablePath::new("midwrite");
    let by = Bystander::start();
    let mut agent = procs::agent(exe, &t.0, &["--bucket-us", "20"]);
    let svc = procs::service(exe, &t.0, &["--rate", "800", "--work-us", "150", "--block-every", "2"]);
    serving(&svc);
    let mut obs = Observed::default();
    let mut rng = monotonic_ns() | 1;
    let (mut worst_restore, mut worst_reattach, mut worst_detect) = (0.0f64, 0.0f64, 0.0f64);
    let t_first = monotonic_ns();
    for round in 0..rounds {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(30 + rng % 120));
        obs.take(&svc);
        let t0 = monotonic_ns();
        drop(agent);
        let mut this = Row::default();
        wait_restored_detected(&svc, t0, &mut this);
        worst_restore = worst_restore.max(this.restore_ms.unwrap_or(f64::INFINITY));
        worst_detect = worst_detect.max(this.detect_ms.unwrap_or(f64::INFINITY));
        left_raised(&svc, Duration::from_millis(100), &mut row.left);
        let t1 = monotonic_ns();
        agent = procs::agent(exe, &t.0, &["--bucket-us", "20"]);
        let back = wait_until(t1, Duration::from_secs(5), || attached(&svc));
        worst_reattach = worst_reattach.max(back.unwrap_or(f64::INFINITY));
        if round + 1 == rounds {
            row.note = format!("{rounds} kills at random points; worst of each column");
        }
    }
    row.restore_ms = Some(worst_restore);
    row.detect_ms = Some(worst_detect);
    row.reattach_ms = Some(worst_reattach);
    by.check(&mut row.left);
    drop(agent);
    let lat = finish(svc, &mut obs, &mut row);
    row.p99_ms = p99(&lat, t_first, u64::MAX);
    row
}

/// The table file removed while the agent and a service run: both keep their mapping and
/// the service stays kernel-ordered; a new service is refused with the fix; an agent
/// started afterwards makes a new table and the running service re-attaches to it.
pub fn table_removed(exe: &Path) -> Row {
    let mut row = Row { fault: "table file removed", ..Default::default() };
    let t = TablePath::new("removed");
    let agent = procs::agent(exe, &t.0, &[]);
    let svc = procs::service(exe, &t.0, &with_load(&[]));
    serving(&svc);
    let mut obs = Observed::default();
    let t0 = monotonic_ns();
    std::fs::remove_file(&t.0).expect("remove the table");
    std::thread::sleep(Duration::from_millis(400));
    if !attached(&svc) {
        row.left.push("the service fell back although its agent still ran".into());
    }
    // A new service cannot attach: it says why and how to fix it.
    let mut late = procs::Proc::start_role(exe, "service", &["--table".into(), t.0.display().to_string()], "late");
    let _ = late.wait_exit(Duration::from_secs(10));
    let why = late.stderr();
    if !why.contains("no agent table") {
        row.left.push(format!("a new service was not refused clearly: {why}"));
    }
    // The agent stops (SIGTERM): it restores, the service falls back on its STOPPED state.
    let mut agent = agent;
    agent.signal(libc::SIGTERM);
    let _ = agent.wait_exit(Duration::from_secs(5));
    let t1 = monotonic_ns();
    wait_restored_detected(&svc, t1, &mut row);
    left_raised(&svc, Duration::from_millis(200), &mut row.left);
    let t2 = monotonic_ns();
    let _agent2 = procs::agent(exe, &t.0, &[]);
    row.reattach_ms = wait_until(t2, Duration::from_secs(5), || attached(&svc));
    let lat = finish(svc, &mut obs, &mut row);
    row.p99_ms = p99(&lat, t0, u64::MAX);
    row.note =
        "service kept kernel ordering on the unlinked table; new service refused; restore after the agent's stop"
            .into();
    row
}

/// The table file truncated to 0 bytes while the agent and a service map it.
pub fn table_truncated(exe: &Path) -> Row {
    let mut row = Row { fault: "table file truncated", ..Default::default() };
    let t = TablePath::new("truncated");
    let by = Bystander::start();
    let sup = procs::supervised_agent(exe, &t.0, 1000);
    let svc = procs::service(exe, &t.0, &with_load(&[]));
    serving(&svc);
    let mut obs = Observed::default();
    let t0 = monotonic_ns();
    std::fs::OpenOptions::new().write(true).open(&t.0).and_then(|f| f.set_len(0)).expect("truncate the table");
    wait_restored_detected(&svc, t0, &mut row);
    left_raised(&svc, Duration::from_millis(200), &mut row.left);
    by.check(&mut row.left);
    row.reattach_ms = wait_until(t0, Duration::from_secs(5), || attached(&svc));
    let alive = svc.pid();
    let lat = finish(svc, &mut obs, &mut row);
    row.p99_ms = p99(&lat, t0, u64::MAX);
    row.note =
        format!("service pid {alive} survived; the supervisor replaced the agent (re-attach from the truncation)");
    drop(sup);
    row
}

/// A second agent started on a table a live agent serves: it must refuse, naming the
/// holder, and leave the first one and its services alone.
pub fn two_agents(exe: &Path) -> Row {
    let mut row = Row { fault: "agent: a second one on the same table", ..Default::default() };
    let t = TablePath::new("two");
    let first = procs::agent(exe, &t.0, &[]);
    let svc = procs::service(exe, &t.0, &with_load(&[]));
    serving(&svc);
    let t0 = Instant::now();
    let mut second = procs::Proc::start_role(exe, "agent", &["--table".into(), t.0.display().to_string()], "second");
    let status = second.wait_exit(Duration::from_secs(10));
    row.detect_ms = Some(t0.elapsed().as_secs_f64() * 1e3);
    let why = second.stderr();
    if status.is_none_or(|s| s.success()) || !why.contains(&format!("pid {}", first.pid())) {
        row.left.push(format!("the second agent did not refuse clearly ({status:?}): {why}"));
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut obs = Observed::default();
    if !attached(&svc) {
        row.left.push("the service fell back: the second agent disturbed the first".into());
    }
    if procs::running_agent(&t.0, Duration::ZERO) != Some(first.pid()) {
        row.left.push("the table no longer names the first agent".into());
    }
    let _ = finish(svc, &mut obs, &mut row);
    row.note = "refused in the time shown (process start to exit), naming the running agent's pid".into();
    row
}

/// The agent under its supervisor, `kill -9`ed: the whole gap from the kill to the
/// fallback, the new agent, the re-attach, and an older request served first again.
pub fn supervised_restart(exe: &Path) -> Row {
    let mut row = Row { fault: "agent: kill -9 under the supervisor", ..Default::default() };
    let t = TablePath::new("supervised");
    let by = Bystander::start();
    let sup = procs::supervised_agent(exe, &t.0, 1000);
    let svc = procs::service(exe, &t.0, &with_load(&["--probe", "true"]));
    serving(&svc);
    let mut obs = Observed::default();
    // Ordering holds before the fault.
    std::thread::sleep(Duration::from_millis(300));
    obs.take(&svc);
    let pid = procs::running_agent(&t.0, Duration::from_secs(1)).expect("an agent");
    let t0 = monotonic_ns();
    // SAFETY: the supervisor's child, our grandchild, by the pid its table names.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    wait_restored_detected(&svc, t0, &mut row);
    left_raised(&svc, Duration::from_millis(300), &mut row.left);
    wait_ordered(&svc, &mut obs, t0, &mut row);
    let end = row.ordering_ms.map_or(u64::MAX, |m| t0 + (m * 1e6) as u64);
    by.check(&mut row.left);
    let lat = finish(svc, &mut obs, &mut row);
    row.p99_ms = p99(&lat, t0, end);
    row.note = "reattach/ordering measured from the kill (respawn included)".into();
    drop(sup);
    row
}

/// A service `kill -9`ed while its threads hold slots (running and blocked jobs, its main
/// thread among them); then its ids handed to a new process on purpose (`ns_last_pid`),
/// which must never be written. Slots reclaimed by the agent's reaper.
pub fn service_killed(exe: &Path) -> Row {
    let mut row = Row { fault: "service: kill -9 with registered threads", ..Default::default() };
    let t = TablePath::new("svckill");
    let agent = procs::agent(exe, &t.0, &["--bucket-us", "50"]);
    let svc = procs::service(exe, &t.0, &with_load(&["--main-job", "true", "--block-every", "1"]));
    serving(&svc);
    std::thread::sleep(Duration::from_millis(100));
    let pid = svc.pid();
    let held = node::busy_slots(&t.0).iter().filter(|s| s.1 == pid).count();
    let t0 = monotonic_ns();
    drop(svc);
    // Timed from the kill, while the id is handed on below.
    let table = t.0.clone();
    let reclaimed = std::thread::spawn(move || {
        let _measuring = MeasuringThread::raise();
        wait_until(t0, Duration::from_secs(3), || !node::busy_slots(&table).iter().any(|s| s.1 == pid))
    });
    // Its id to a new process at SCHED_BATCH, as fast as we can after the kill. At
    // SCHED_OTHER: this thread runs the suite above the agent (`MeasuringThread`), and a
    // spawn loop there, with its children inheriting that priority, kept the agent off both
    // CPUs for the whole loop (the reclaim then measured the loop, ~950 ms, not the agent).
    let mut victim = None;
    let _normal = NormalThread::lower();
    if node::can_choose_pids() {
        for _ in 0..100 {
            let _ = node::next_id_will_be(pid as i32);
            let child = std::process::Command::new("sleep").arg("30").spawn().expect("start `sleep`");
            if child.id() == pid {
                let _ = sys::set_policy(pid as i32, ThreadPolicy { policy: libc::SCHED_BATCH, priority: 0 });
                victim = Some(child);
                break;
            }
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    // Keep the agent rewriting levels (a second service's jobs move the base) meanwhile.
    let other = procs::service(exe, &t.0, &with_load(&[]));
    row.detect_ms = reclaimed.join().unwrap_or(None);
    std::thread::sleep(Duration::from_millis(300));
    drop(agent); // its restore at exit must skip the dead service's ids too
    std::thread::sleep(Duration::from_millis(50));
    match &victim {
        Some(v) => {
            for th in node::threads(v.id()) {
                if th.policy.base() != libc::SCHED_BATCH {
                    row.left.push(format!("the process that took the dead service's id: {}", th.describe()));
                }
            }
        }
        None => row.note.push_str("could not hand the id on (no ns_last_pid); "),
    }
    let mut obs = Observed::default();
    let _ = finish(other, &mut obs, &mut row);
    row.admitted = 0;
    row.lost = 0; // the killed service's requests died with it; none of another service's were lost
    row.note.push_str(&format!(
        "{held} slots held at the kill, reclaimed in the detect time; id {pid} {}",
        if victim.is_some() { "reused by a SCHED_BATCH process, never written" } else { "not reused" }
    ));
    if let Some(mut v) = victim {
        let _ = v.kill();
        let _ = v.wait();
    }
    row
}

/// A job thread that ends mid-job without unwinding, its id then given to a new thread of
/// the same service on purpose; then the agent is killed (the fallback's restore) and
/// must not write that id either.
pub fn job_thread_exits(exe: &Path) -> Row {
    let mut row = Row { fault: "service: job thread exits mid-job", ..Default::default() };
    let t = TablePath::new("exit");
    let agent = procs::agent(exe, &t.0, &["--bucket-us", "50"]);
    if !node::can_choose_pids() {
        row.note = "skipped: cannot write /proc/sys/kernel/ns_last_pid".into();
        return row;
    }
    let svc = procs::service(exe, &t.0, &with_load(&["--exit-mid-job", "true"]));
    let mut obs = Observed::default();
    if let Some(line) = svc.until("reuse", Duration::from_secs(20), |line| obs.note(line)) {
        obs.note(&line);
    }
    let Some(tid) = obs.reused else {
        row.note = "the service could not hand the id on (another process took it each time)".into();
        return row;
    };
    let t0 = monotonic_ns();
    let deadline = Instant::now() + Duration::from_secs(3);
    let slot_of = |tid: i32| node::busy_slots(&t.0).iter().any(|s| s.2 == tid as u32);
    while slot_of(tid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    row.detect_ms = (!slot_of(tid)).then(|| ms(monotonic_ns() - t0));
    let t1 = monotonic_ns();
    drop(agent);
    let mut after = Row::default();
    wait_restored_detected(&svc, t1, &mut after);
    row.restore_ms = after.restore_ms;
    left_raised(&svc, Duration::from_millis(200), &mut row.left);
    match sys::get_policy(tid) {
        Ok(p) if p.base() == libc::SCHED_BATCH => {}
        Ok(p) => row.left.push(format!("the thread that took id {tid}: {}", p.describe())),
        Err(e) => row.left.push(format!("the thread that took id {tid} is gone: {e}")),
    }
    let lat = finish(svc, &mut obs, &mut row);
    row.p99_ms = p99(&lat, t0, u64::MAX);
    row.note = format!("slot of the dead thread reclaimed in the detect time; id {tid} reused, never written");
    row
}

/// Jobs that panic (every 7th): each still completes, its thread keeps its policy, no slot
/// leaks; then the agent is killed.
pub fn job_panics(exe: &Path) -> Row {
    let mut row = Row { fault: "service: jobs that panic", ..Default::default() };
    let t = TablePath::new("panic");
    let agent = procs::agent(exe, &t.0, &[]);
    let svc = procs::service(exe, &t.0, &with_load(&["--panic-every", "7"]));
    serving(&svc);
    std::thread::sleep(Duration::from_millis(500));
    let t0 = monotonic_ns();
    drop(agent);
    wait_restored_detected(&svc, t0, &mut row);
    left_raised(&svc, Duration::from_millis(200), &mut row.left);
    let mut obs = Observed::default();
    let lat = finish(svc, &mut obs, &mut row);
    row.p99_ms = p99(&lat, 0, u64::MAX);
    row.note = "every 7th job panics; each completes (lost counts them)".into();
    row
}

/// A pool that grows in bursts (4× the rate for 300 ms) and shrinks between them (threads
/// retire after 100 ms idle); the agent killed mid-burst.
pub fn pool_grows_and_shrinks(exe: &Path) -> Row {
    let mut row = Row { fault: "service: pool grows and shrinks", ..Default::default() };
    let t = TablePath::new("pool");
    let agent = procs::agent(exe, &t.0, &[]);
    let svc = procs::service(
        exe,
        &t.0,
        &["--rate", "150", "--work-us", "1500", "--bursts", "true", "--idle-retire-ms", "100"],
    );
    let (mut most, mut fewest) = (0usize, usize::MAX);
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        let n = node::threads(svc.pid()).iter().filter(|t| t.name == "tailor-job").count();
        most = most.max(n);
        fewest = fewest.min(n);
        std::thread::sleep(Duration::from_millis(10));
    }
    let t0 = monotonic_ns();
    drop(agent);
    wait_restored_detected(&svc, t0, &mut row);
    left_raised(&svc, Duration::from_millis(700), &mut row.left);
    let mut obs = Observed::default();
    let lat = finish(svc, &mut obs, &mut row);
    row.p99_ms = p99(&lat, t0, u64::MAX);
    row.note =
        format!("pool between {fewest} and {most} threads; watched for 700 ms after the fallback (bursts go on)");
    row
}
