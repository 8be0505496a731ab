//! `orf-adaptive` in the agent: the controller's decisions run on a helper thread at normal
//! priority, off the agent's SCHED_FIFO loop.
//!
//! Each decision replays a window of jobs under every candidate `c` (core's
//! `policy::adaptive`): milliseconds to a tenth of a second of CPU. Run inside the policy
//! call, as the simulator runs it, that time was spent above the band by the thread that
//! moves jobs in and out of it, and no job moved meanwhile. Here the loop only cuts windows
//! (core's observer, a few map operations per event) and hands each to the helper, which
//! decides and publishes the new `c`; the loop applies it on its next pass.
//!
//! The hand-over never waits and holds at most one window: the loop swaps the newest window
//! into a one-slot mailbox (an atomic pointer) and unparks the helper; a window the helper
//! has not taken yet is replaced and counted as dropped (the next decision is made without
//! it, and without its warm-up). The decided `c` comes back as one atomic word. The helper
//! sets itself to SCHED_OTHER at nice [`HELPER_NICE`] (a thread started by the agent would
//! otherwise inherit its SCHED_FIFO), so it runs on CPU time the band leaves, like any
//! other normal-priority work: under overload decisions come late, or windows are dropped,
//! and the band keeps moving.

use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tailor_core::latency::quantile_sorted;
use tailor_core::policy::adaptive::{Decider, Window};
use tailor_core::Nanos;

use super::sys::{self, ThreadPolicy};
use crate::cpu::thread_cpu_ns;
use crate::driver::Driver;

/// The helper's nice value: below the services' normal-priority threads.
pub const HELPER_NICE: i32 = 10;
/// How long the helper sleeps between looks at its stop flag when no window comes.
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// What the decision helper did, for the agent's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct DecisionReport {
    /// Windows handed to the helper.
    pub windows: u64,
    /// Windows replaced in the mailbox before the helper took them (it lagged).
    pub dropped: u64,
    /// Windows the helper decided.
    pub decided: u64,
    /// Decisions that changed `c`, and that the loop applied.
    pub changes: u64,
    /// The pool capacity in force at the end, `max(c, cpus)`.
    pub cap: usize,
    /// CPU time the helper thread used, ns.
    pub cpu_ns: u64,
}

/// State shared by the loop and the helper.
struct Shared {
    /// The newest window not yet taken (null: none), a `Box<Window>` turned into a pointer.
    mailbox: AtomicPtr<Window>,
    /// The latest decided capacity: `(changes << 32) | cap`, 0 before the first change.
    decided: AtomicU64,
    stop: AtomicBool,
    decided_windows: AtomicU64,
    cpu_ns: AtomicU64,
}

impl Shared {
    /// Takes the window in the mailbox, if any.
    fn take(&self) -> Option<Box<Window>> {
        let p = self.mailbox.swap(ptr::null_mut(), Ordering::AcqRel);
        // SAFETY: non-null pointers in the mailbox come from `Box::into_raw` in `offer`,
        // and the swap gives each to exactly one taker.
        (!p.is_null()).then(|| unsafe { Box::from_raw(p) })
    }
}

/// The helper thread and the loop's end of the hand-over.
pub(super) struct DecisionThread {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
    windows: u64,
    dropped: u64,
    /// The `changes` count of the last decision the loop applied.
    applied: u64,
    /// The agent's passes since the last window offered: what a rotation costs.
    pub rotation_cost: RotationCost,
    cap: usize,
}

impl DecisionThread {
    /// Starts the helper with `decide` (a window in, the new capacity out when it changes)
    /// and the capacity in force now.
    pub fn start<F>(mut decide: F, cap: usize) -> std::io::Result<DecisionThread>
    where
        F: FnMut(&Window) -> Option<usize> + Send + 'static,
    {
        let shared = Arc::new(Shared {
            mailbox: AtomicPtr::new(ptr::null_mut()),
            decided: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            decided_windows: AtomicU64::new(0),
            cpu_ns: AtomicU64::new(0),
        });
        let theirs = shared.clone();
        let handle = std::thread::Builder::new().name("tailor-agent-c".into()).spawn(move || {
            become_normal_priority();
            let start_cpu = thread_cpu_ns();
            let mut changes = 0u64;
            while !theirs.stop.load(Ordering::Acquire) {
                let Some(window) = theirs.take() else {
                    std::thread::park_timeout(IDLE_WAIT);
                    continue;
                };
                if let Some(cap) = decide(&window) {
                    changes += 1;
                    theirs.decided.store((changes << 32) | (cap as u64 & 0xffff_ffff), Ordering::Release);
                }
                theirs.decided_windows.fetch_add(1, Ordering::Relaxed);
                theirs.cpu_ns.store(thread_cpu_ns() - start_cpu, Ordering::Relaxed);
            }
            theirs.cpu_ns.store(thread_cpu_ns() - start_cpu, Ordering::Relaxed);
        })?;
        Ok(DecisionThread {
            shared,
            handle: Some(handle),
            windows: 0,
            dropped: 0,
            applied: 0,
            rotation_cost: RotationCost::default(),
            cap,
        })
    }

    /// Starts the helper with core's decider.
    pub fn with_decider(mut decider: Decider) -> std::io::Result<DecisionThread> {
        let cap = decider.cap();
        DecisionThread::start(
            move |w| {
                let choice = decider.decide(w);
                log_decision(&decider, w);
                choice
            },
            cap,
        )
    }

    /// Hands `window` to the helper. Never waits: a window the helper has not taken yet is
    /// replaced (and counted as dropped).
    pub fn offer(&mut self, window: Window) {
        self.windows += 1;
        let old = self.shared.mailbox.swap(Box::into_raw(Box::new(window)), Ordering::AcqRel);
        if !old.is_null() {
            self.dropped += 1;
            // SAFETY: as in `Shared::take`: the swap made this pointer ours alone.
            drop(unsafe { Box::from_raw(old) });
        }
        if let Some(h) = &self.handle {
            h.thread().unpark();
        }
    }

    /// The capacity the helper decided since the last call, if it changed.
    pub fn newest(&mut self) -> Option<usize> {
        let word = self.shared.decided.load(Ordering::Acquire);
        let changes = word >> 32;
        if changes == self.applied {
            return None;
        }
        self.applied = changes;
        self.cap = (word & 0xffff_ffff) as usize;
        Some(self.cap)
    }

    /// One pass of the agent's loop: the window `driver` cut since the last pass goes to
    /// the helper, with what a rotation cost the agent while it ran (`rotation_cost`), and
    /// the newest decided `c` to the policy. Returns the capacity applied.
    pub fn exchange(&mut self, driver: &mut Driver, now: Nanos) -> Option<usize> {
        if let Some(mut w) = driver.take_window() {
            w.set_switch_cost(self.rotation_cost.take());
            self.offer(w);
        }
        let cap = self.newest()?;
        driver.set_c(now, cap);
        Some(cap)
    }

    /// Stops the helper, waits for it (a decision in progress finishes first) and reports.
    pub fn stop(mut self) -> DecisionReport {
        self.join();
        self.report()
    }

    /// What the helper has done so far.
    pub fn report(&self) -> DecisionReport {
        DecisionReport {
            windows: self.windows,
            dropped: self.dropped,
            decided: self.shared.decided_windows.load(Ordering::Relaxed),
            changes: self.applied,
            cap: self.cap,
            cpu_ns: self.shared.cpu_ns.load(Ordering::Relaxed),
        }
    }

    fn join(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            if h.join().is_err() {
                tracing::warn!("the adaptive-c helper thread panicked; c stayed at its last value");
            }
        }
        drop(self.shared.take());
    }
}

impl Drop for DecisionThread {
    fn drop(&mut self) {
        self.join();
    }
}

/// What a rotation costs the node, from the agent's own passes: the agent runs above the
/// band, so every µs of its CPU is taken from the jobs, and a pass that changes the running
/// set (one rotation at most) costs more than one that does not. The difference of their
/// means is the marginal CPU of a rotation: its `sched_setscheduler` calls (about 13 µs on
/// the 2-CPU test VM) and the scans, wake-ups and bookkeeping that come with them.
#[derive(Clone, Copy, Debug, Default)]
pub struct RotationCost {
    /// Passes that rotated and their CPU.
    rotating: (u64, Nanos),
    /// Passes that did not and their CPU.
    quiet: (u64, Nanos),
}

impl RotationCost {
    /// Notes one pass of the loop: whether it rotated and the CPU it took.
    pub fn record(&mut self, rotated: bool, cpu: Nanos) {
        let side = if rotated { &mut self.rotating } else { &mut self.quiet };
        side.0 += 1;
        side.1 += cpu;
    }

    /// The marginal CPU of a rotation over the passes noted since the last call (0 without
    /// passes of both kinds), and starts afresh.
    pub fn take(&mut self) -> Nanos {
        let mean = |(n, cpu): (u64, Nanos)| cpu.checked_div(n);
        let cost = match (mean(self.rotating), mean(self.quiet)) {
            (Some(r), Some(q)) => r.saturating_sub(q),
            _ => 0,
        };
        *self = RotationCost::default();
        cost
    }
}

/// One line per decision: what the window held and how each capacity replayed, so an
/// operator can see why `c` moved or stayed (the replay ranks capacities by pooled p99).
fn log_decision(decider: &Decider, w: &Window) {
    let mut services: Vec<Nanos> = w.services().collect();
    services.sort_unstable();
    let ms = |p: f64| quantile_sorted(&services, p) as f64 / 1e6;
    let ranking: Vec<String> = decider
        .ladder()
        .iter()
        .zip(decider.pooled_p99s())
        .map(|(cap, p99)| format!("{cap}: {:.2}", *p99 as f64 / 1e6))
        .collect();
    let f = decider.fidelity();
    tracing::info!(
        "adaptive c: window {} ({} jobs; CPU per job p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms; {:.1} µs per rotation): \
         replayed p99 ms by capacity [{}]; at the capacity that ran ({}) replayed {:.2} ms, measured {:.2} ms \
         (this window {:.2} / {:.2}); capacity {}",
        w.seq(),
        w.len(),
        ms(0.5),
        ms(0.99),
        ms(1.0),
        w.switch_cost() as f64 / 1e3,
        ranking.join(", "),
        f.cap,
        f.replayed as f64 / 1e6,
        f.measured as f64 / 1e6,
        f.window_replayed as f64 / 1e6,
        f.window_measured as f64 / 1e6,
        decider.cap()
    );
}

/// The calling thread to SCHED_OTHER at nice [`HELPER_NICE`]. A thread the agent starts
/// inherits its SCHED_FIFO; left there, the replays would run above the band again.
fn become_normal_priority() {
    let other = ThreadPolicy { policy: libc::SCHED_OTHER, priority: 0 };
    if let Err(e) = sys::set_policy(0, other) {
        tracing::warn!(error = %e, "adaptive-c helper: cannot leave the agent's policy for SCHED_OTHER");
    }
    // SAFETY: setpriority on this thread's own id; no memory is passed.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, sys::gettid() as libc::id_t, HELPER_NICE) } != 0 {
        let e = std::io::Error::last_os_error();
        tracing::warn!(error = %e, "adaptive-c helper: cannot set nice {HELPER_NICE}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Instant;
    use tailor_core::policy::{Job, JobId};
    use tailor_core::{Dist, PolicySpec, Rng};

    /// Cuts `n` real windows of 4 jobs from an `orf-adaptive` policy with its decider
    /// detached (a `Window` can only be made by the observer).
    fn windows(n: usize) -> Vec<Window> {
        let spec = PolicySpec::OrfAdaptive { c_max: 8, slice_us: 500.0, window_jobs: 4 };
        let mut driver = Driver::new(spec.build_any(1, 0).expect("valid"));
        assert!(driver.detach_decider().is_some());
        let mut out = Vec::new();
        let mut now = 0;
        let mut id: JobId = 0;
        while out.len() < n {
            now += 1_000;
            id += 1;
            driver.arrive(now, Job { id, gat: now, deadline: tailor_core::time::NEVER, class: 0 });
            now += 500;
            driver.complete(now, id);
            out.extend(driver.take_window());
        }
        out
    }

    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A helper stuck in a decision does not hold up the loop: offers and polls go on,
    /// windows it cannot take are dropped (counted), and once free it decides the newest
    /// and its decision reaches the loop. Stopping joins the thread (its state is dropped).
    #[test]
    fn a_rotation_costs_what_rotating_passes_take_beyond_quiet_ones() {
        let mut cost = RotationCost::default();
        assert_eq!(cost.take(), 0, "no passes, no estimate");
        for _ in 0..3 {
            cost.record(false, 10_000);
        }
        cost.record(true, 40_000);
        cost.record(true, 60_000);
        assert_eq!(cost.take(), 40_000, "mean 50 µs against 10 µs");
        cost.record(true, 60_000);
        assert_eq!(cost.take(), 0, "taken afresh: no quiet pass to compare with");
        cost.record(true, 5_000);
        cost.record(false, 9_000);
        assert_eq!(cost.take(), 0, "a rotating pass cheaper than a quiet one costs nothing, not less");
    }

    #[test]
    fn a_stuck_decision_never_holds_up_the_loop() {
        let (started_tx, started) = mpsc::channel::<u64>();
        let (release, release_rx) = mpsc::channel::<()>();
        let seen = Arc::new(());
        let held = seen.clone();
        let mut thread = DecisionThread::start(
            move |w| {
                let _keep = &held;
                started_tx.send(w.seq()).expect("test alive");
                release_rx.recv().expect("test releases");
                Some(10 + w.seq() as usize)
            },
            1,
        )
        .expect("spawn");
        let mut ws = windows(10).into_iter();
        thread.offer(ws.next().unwrap());
        assert_eq!(started.recv().unwrap(), 0, "the helper took window 0 and is stuck in it");
        // While it is stuck: nine more windows and many passes, none of which waits.
        let mut passes = 0;
        for w in ws {
            thread.offer(w);
            for _ in 0..100 {
                assert_eq!(thread.newest(), None, "nothing decided yet");
                passes += 1;
            }
        }
        assert_eq!(passes, 900);
        assert_eq!(thread.report().dropped, 8, "windows 1..=8 were replaced before being taken");
        release.send(()).unwrap();
        // Window 0's decision, then the newest window (9), not the dropped ones.
        wait_for("window 0's decision", || thread.newest() == Some(10));
        assert_eq!(started.recv().unwrap(), 9);
        release.send(()).unwrap();
        wait_for("window 9's decision", || thread.newest() == Some(19));
        let report = thread.stop();
        assert_eq!(Arc::strong_count(&seen), 1, "the helper's state was dropped: the thread ended");
        assert_eq!(
            report,
            DecisionReport { windows: 10, dropped: 8, decided: 2, changes: 2, cap: 19, cpu_ns: report.cpu_ns }
        );
    }

    /// The helper leaves the agent's real-time policy for SCHED_OTHER at nice 10.
    #[test]
    fn the_helper_runs_at_normal_priority_niced() {
        let (tx, rx) = mpsc::channel();
        let thread = DecisionThread::start(
            move |_| {
                let policy = sys::get_policy(0).expect("own policy").policy;
                // SAFETY: getpriority on this thread's own id.
                let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, sys::gettid() as libc::id_t) };
                tx.send((policy, nice)).expect("test alive");
                None
            },
            1,
        )
        .expect("spawn");
        let mut thread = thread;
        thread.offer(windows(1).pop().unwrap());
        let (policy, nice) = rx.recv_timeout(Duration::from_secs(30)).expect("a decision");
        assert_eq!(policy, libc::SCHED_OTHER);
        assert_eq!(nice, HELPER_NICE);
        assert_eq!(thread.stop().decided, 1);
    }

    /// Through the loop's `exchange`, a policy with its decider on the helper schedules
    /// exactly as the same policy deciding inline, on Bimodal service where the controller
    /// raises `c` (here the loop waits for each decision, so none is late or dropped; in
    /// the agent they may come a pass or more later).
    #[test]
    fn decisions_made_on_the_helper_reach_the_policy() {
        let spec = PolicySpec::OrfAdaptive { c_max: 32, slice_us: 500.0, window_jobs: 400 };
        let mut inline = Driver::new(spec.build_any(3, 0).unwrap());
        let mut split = Driver::new(spec.build_any(3, 0).unwrap());
        let mut thread = DecisionThread::with_decider(split.detach_decider().expect("orf-adaptive")).unwrap();
        let dist = Dist::mixture(vec![(0.99, Dist::exp_ns(4e6)), (0.01, Dist::exp_ns(100e6))]);
        let mut rng = Rng::new(7);
        // A FCFS-ish stream on 3 CPUs at ρ ≈ 0.8; each job completes when its demand is served.
        let (mut now, mut next_id) = (0u64, 0u64);
        let mut remaining: std::collections::HashMap<JobId, u64> = Default::default();
        let mut split_caps = Vec::new();
        let mut arrivals_left = 6_000;
        let mut next_arrival = 0u64;
        while arrivals_left > 0 || !remaining.is_empty() {
            let running: Vec<JobId> = split.running().iter().flatten().copied().collect();
            let soonest = running.iter().map(|j| remaining[j]).min().map(|r| now + r);
            let tick = split.next_tick();
            let arrival = (arrivals_left > 0).then_some(next_arrival);
            let t = [soonest, tick, arrival].into_iter().flatten().min().expect("something happens");
            for j in &running {
                *remaining.get_mut(j).unwrap() -= t - now;
            }
            now = t;
            if let Some(&done) = running.iter().find(|j| remaining[j] == 0) {
                remaining.remove(&done);
                split.complete(now, done);
                inline.complete(now, done);
            } else if Some(now) == arrival {
                next_id += 1;
                let job = Job { id: next_id, gat: now, deadline: tailor_core::time::NEVER, class: 0 };
                remaining.insert(next_id, dist.sample_ns(&mut rng).max(1));
                split.arrive(now, job);
                inline.arrive(now, job);
                arrivals_left -= 1;
                next_arrival = now + rng.exp(dist.mean_ns() / (0.8 * 3.0)) as u64;
            } else {
                split.tick(now);
                inline.tick(now);
            }
            if let Some(w) = split.take_window() {
                let before = thread.report().decided;
                thread.offer(w);
                wait_for("the helper's decision", || thread.shared.decided_windows.load(Ordering::Acquire) > before);
                split_caps.extend(thread.exchange(&mut split, now));
            }
            assert_eq!(split.running(), inline.running(), "same schedule at {now}");
        }
        assert!(!split_caps.is_empty(), "the controller moved c on Bimodal service");
        assert!(split_caps.iter().all(|&c| c > 3), "up from global FCFS: {split_caps:?}");
        let report = thread.stop();
        assert_eq!((report.dropped, report.changes as usize), (0, split_caps.len()));
    }
}
