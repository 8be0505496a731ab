//! `tailor-loadgen`: the open-loop pacing core every load generator of the harness runs on
//! (the HTTP generator, memcached's, the fan-out benchmark's in-process handler calls, the
//! proxy overload run's fresh connections; docs/loadgen.md).
//!
//! Given intended send times (ns from the start), a sender thread of its own waits for each
//! one (a precise wait: it sleeps, then spins the last stretch) and starts the request as a
//! tokio task; it never waits for an answer, so a slow system cannot slow the arrivals down
//! and latency measured from the *intended* time shows all of the queueing (no coordinated
//! omission). At most `max_in_flight` requests are outstanding: one due while that many are
//! is recorded as [`Outcome::Overflow`] instead of queued without bound. Every request gets a
//! [`Record`] (intended time, actual send time, completion, outcome), in arrival order.
//!
//! The transport is a parameter: a closure from an [`Arrival`] to a future that performs the
//! request and returns whatever the caller wants to keep of the answer.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tailor_core::latency::quantile_sorted;
use tailor_core::time::{monotonic_ns, sleep_until_monotonic};
use tailor_core::Nanos;

/// How long the sender spins before each intended time instead of sleeping: the wake-up
/// from `clock_nanosleep` takes a few to tens of µs, so it sleeps until this much before
/// the time and spins the rest. Short, because the spin takes a CPU from the system under
/// test on the same host.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(20);

/// How the requests are sent.
#[derive(Clone, Debug)]
pub struct OpenLoopConfig {
    /// Requests outstanding at once; one due while this many are outstanding is recorded as
    /// [`Outcome::Overflow`] and not sent.
    pub max_in_flight: usize,
    /// A request whose transport has not finished this long after its send is
    /// [`Outcome::TimedOut`] (its future is dropped, which closes what it held).
    pub timeout: Duration,
    /// Run the sender (and, with [`run`], the runtime's workers) at this SCHED_FIFO priority
    /// (needs CAP_SYS_NICE; without it they stay as they are and a warning is logged). The
    /// generator stands in for clients on other machines: starved by the system under test,
    /// it would send late, which is not the system's doing.
    pub rt_priority: Option<i32>,
    /// See [`DEFAULT_SPIN`].
    pub spin: Duration,
}

impl OpenLoopConfig {
    /// `max_in_flight` and `timeout`, no real-time priority, the default spin.
    pub fn new(max_in_flight: usize, timeout: Duration) -> OpenLoopConfig {
        OpenLoopConfig { max_in_flight, timeout, rt_priority: None, spin: DEFAULT_SPIN }
    }
}

/// The request the transport is asked to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// Position in the schedule.
    pub index: usize,
    /// Intended send time, ns from the start.
    pub intended_ns: Nanos,
}

/// How a request ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome<T> {
    /// The transport finished within the timeout with this value (which may itself say the
    /// request failed: errors are the transport's to classify).
    Done(T),
    /// The transport had not finished `timeout` after the send.
    TimedOut,
    /// Due while `max_in_flight` requests were outstanding: not sent.
    Overflow,
}

/// One request as the generator saw it. Times are ns from the run's start
/// ([`Run::start_ns`], CLOCK_MONOTONIC).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<T> {
    pub index: usize,
    /// When the schedule said to send it; latency runs from here.
    pub intended_ns: Nanos,
    /// When its task started sending it (0 for [`Outcome::Overflow`]).
    pub sent_ns: Nanos,
    /// When the transport finished or timed out (0 for [`Outcome::Overflow`]).
    pub done_ns: Nanos,
    pub outcome: Outcome<T>,
}

impl<T> Record<T> {
    /// Intended send time to completion, for a request the transport finished.
    pub fn latency_ns(&self) -> Option<Nanos> {
        matches!(self.outcome, Outcome::Done(_)).then(|| self.done_ns.saturating_sub(self.intended_ns))
    }

    /// How late it was sent, for a request that was sent.
    pub fn send_lag_ns(&self) -> Option<Nanos> {
        (!matches!(self.outcome, Outcome::Overflow)).then(|| self.sent_ns.saturating_sub(self.intended_ns))
    }
}

/// What a run returns: one record per intended time, in arrival order.
#[derive(Clone, Debug)]
pub struct Run<T> {
    /// CLOCK_MONOTONIC at time 0 of the schedule (to place records on another clock).
    pub start_ns: Nanos,
    pub records: Vec<Record<T>>,
}

/// Percentiles of the send lag (actual − intended send time) over the requests sent: how far
/// the generator fell behind its schedule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendLag {
    pub sent: usize,
    pub p50_ns: Nanos,
    pub p99_ns: Nanos,
    pub max_ns: Nanos,
}

impl<T> Run<T> {
    pub fn send_lag(&self) -> SendLag {
        let mut lag: Vec<Nanos> = self.records.iter().filter_map(Record::send_lag_ns).collect();
        lag.sort_unstable();
        SendLag {
            sent: lag.len(),
            p50_ns: quantile_sorted(&lag, 0.5),
            p99_ns: quantile_sorted(&lag, 0.99),
            max_ns: lag.last().copied().unwrap_or(0),
        }
    }

    /// Requests not sent because `max_in_flight` were outstanding.
    pub fn overflowed(&self) -> usize {
        self.records.iter().filter(|r| matches!(r.outcome, Outcome::Overflow)).count()
    }
}

/// The run could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum OpenLoopError {
    #[error("load generator: cannot start its tokio runtime: {0}")]
    Runtime(std::io::Error),
    #[error("load generator: cannot start its sender thread: {0}")]
    SenderThread(std::io::Error),
    #[error("load generator: intended send times must ascend, but time {index} ({at_ns} ns) is before the one before it ({previous_ns} ns); sort the schedule")]
    NotAscending { index: usize, at_ns: Nanos, previous_ns: Nanos },
    #[error("load generator: max_in_flight is 0, so nothing could be sent; allow at least 1")]
    NoInFlight,
    #[error("load generator: the transport panicked on request {index}")]
    TransportPanicked { index: usize },
    #[error("load generator: the sender thread panicked")]
    SenderPanicked,
}

/// Runs the schedule on a runtime of its own (two workers: the connections' I/O must never be
/// what limits the rate) and returns when every request has finished, timed out or overflowed.
/// Call it from a thread that is not inside a tokio runtime.
pub fn run<T, F, Fut>(intended_ns: &[Nanos], cfg: &OpenLoopConfig, transport: F) -> Result<Run<T>, OpenLoopError>
where
    T: Send + 'static,
    F: Fn(Arrival) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = T> + Send + 'static,
{
    check(intended_ns, cfg)?;
    let rt_priority = cfg.rt_priority;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("tailor-loadgen")
        .on_thread_start(move || {
            if let Some(p) = rt_priority {
                set_fifo_priority(p);
            }
        })
        .enable_all()
        .build()
        .map_err(OpenLoopError::Runtime)?;
    let handle = rt.handle().clone();
    let transport = Arc::new(transport);
    // The sender is a thread of its own (it exits with the run, so the priority it takes
    // never outlives it).
    let (start_ns, pending) = std::thread::scope(|scope| {
        let sender = std::thread::Builder::new()
            .name("tailor-loadgen-sender".into())
            .spawn_scoped(scope, || pace(intended_ns, cfg, transport, &handle))
            .map_err(OpenLoopError::SenderThread)?;
        sender.join().map_err(|_| OpenLoopError::SenderPanicked)
    })?;
    let records = rt.block_on(collect(pending))?;
    Ok(Run { start_ns, records })
}

/// Runs the schedule with its requests as tasks of the runtime this is awaited in (for an
/// in-process handler that lives there); the sender is still a thread of its own, so the
/// runtime's workers being busy does not delay the sends.
pub async fn run_in_current_runtime<T, F, Fut>(
    intended_ns: Vec<Nanos>,
    cfg: &OpenLoopConfig,
    transport: F,
) -> Result<Run<T>, OpenLoopError>
where
    T: Send + 'static,
    F: Fn(Arrival) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = T> + Send + 'static,
{
    check(&intended_ns, cfg)?;
    let handle = tokio::runtime::Handle::current();
    let (cfg, transport) = (cfg.clone(), Arc::new(transport));
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("tailor-loadgen-sender".into())
        .spawn(move || {
            let _ = tx.send(pace(&intended_ns, &cfg, transport, &handle));
        })
        .map_err(OpenLoopError::SenderThread)?;
    let (start_ns, pending) = rx.await.map_err(|_| OpenLoopError::SenderPanicked)?;
    Ok(Run { start_ns, records: collect(pending).await? })
}

fn check(intended_ns: &[Nanos], cfg: &OpenLoopConfig) -> Result<(), OpenLoopError> {
    if cfg.max_in_flight == 0 {
        return Err(OpenLoopError::NoInFlight);
    }
    match intended_ns.windows(2).position(|w| w[1] < w[0]) {
        Some(i) => {
            Err(OpenLoopError::NotAscending { index: i + 1, at_ns: intended_ns[i + 1], previous_ns: intended_ns[i] })
        }
        None => Ok(()),
    }
}

/// A request's task, or the record of one that overflowed.
enum Pending<T> {
    Sent(usize, tokio::task::JoinHandle<Record<T>>),
    Overflow(Record<T>),
}

/// The sender loop: waits for each intended time and starts the request as a task on `rt`.
/// Returns the start (CLOCK_MONOTONIC) and one pending entry per request.
fn pace<T, F, Fut>(
    intended_ns: &[Nanos],
    cfg: &OpenLoopConfig,
    transport: Arc<F>,
    rt: &tokio::runtime::Handle,
) -> (Nanos, Vec<Pending<T>>)
where
    T: Send + 'static,
    F: Fn(Arrival) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = T> + Send + 'static,
{
    if let Some(p) = cfg.rt_priority {
        set_fifo_priority(p);
    }
    tighten_timer_slack();
    let spin_ns = cfg.spin.as_nanos() as Nanos;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let start = monotonic_ns();
    let mut pending = Vec::with_capacity(intended_ns.len());
    for (index, &intended) in intended_ns.iter().enumerate() {
        wait_until(start + intended, spin_ns);
        if in_flight.load(Ordering::Relaxed) >= cfg.max_in_flight {
            let outcome = Outcome::Overflow;
            pending.push(Pending::Overflow(Record { index, intended_ns: intended, sent_ns: 0, done_ns: 0, outcome }));
            continue;
        }
        in_flight.fetch_add(1, Ordering::Relaxed);
        let (transport, in_flight, timeout) = (transport.clone(), in_flight.clone(), cfg.timeout);
        let task = rt.spawn(async move {
            let sent_ns = monotonic_ns() - start;
            let result = tokio::time::timeout(timeout, transport(Arrival { index, intended_ns: intended })).await;
            let done_ns = monotonic_ns() - start;
            in_flight.fetch_sub(1, Ordering::Relaxed);
            let outcome = result.map_or(Outcome::TimedOut, Outcome::Done);
            Record { index, intended_ns: intended, sent_ns, done_ns, outcome }
        });
        pending.push(Pending::Sent(index, task));
    }
    (start, pending)
}

/// Waits for every task, keeping arrival order.
async fn collect<T>(pending: Vec<Pending<T>>) -> Result<Vec<Record<T>>, OpenLoopError> {
    let mut records = Vec::with_capacity(pending.len());
    for p in pending {
        records.push(match p {
            Pending::Sent(index, task) => task.await.map_err(|_| OpenLoopError::TransportPanicked { index })?,
            Pending::Overflow(record) => record,
        });
    }
    Ok(records)
}

/// Sleeps until `spin_ns` before `deadline_ns` (CLOCK_MONOTONIC), then spins to it.
fn wait_until(deadline_ns: Nanos, spin_ns: Nanos) {
    if deadline_ns.saturating_sub(monotonic_ns()) > spin_ns {
        sleep_until_monotonic(deadline_ns - spin_ns);
    }
    while monotonic_ns() < deadline_ns {
        std::hint::spin_loop();
    }
}

/// Asks the kernel to wake this thread's timers with 1 ns of slack instead of the default
/// 50 µs, so intended send times are kept to a few µs.
pub fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long and affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
}

/// Puts the calling thread in SCHED_FIFO at `priority`; failure (no CAP_SYS_NICE) leaves it
/// as it was, which only makes the generator weaker.
pub fn set_fifo_priority(priority: i32) {
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "load generator cannot take SCHED_FIFO {priority}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_that_goes_back_in_time_is_refused_naming_the_time() {
        let cfg = OpenLoopConfig::new(8, Duration::from_secs(1));
        let err = run(&[0, 5, 3], &cfg, |_| async {}).unwrap_err();
        assert!(matches!(err, OpenLoopError::NotAscending { index: 2, at_ns: 3, previous_ns: 5 }), "{err}");
        let err = run(&[0], &OpenLoopConfig::new(0, Duration::from_secs(1)), |_| async {}).unwrap_err();
        assert!(err.to_string().contains("max_in_flight"), "{err}");
    }

    #[test]
    fn a_transport_that_outlives_the_timeout_is_recorded_as_timed_out() {
        let cfg = OpenLoopConfig::new(8, Duration::from_millis(20));
        let run = run(&[0, 1_000_000], &cfg, |a: Arrival| async move {
            if a.index == 1 {
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            a.index
        })
        .unwrap();
        assert_eq!(run.records[0].outcome, Outcome::Done(0));
        assert_eq!(run.records[1].outcome, Outcome::TimedOut);
        assert!(run.records[1].latency_ns().is_none());
        // It was given up on after the timeout, not after the transport's 5 s.
        assert!(run.records[1].done_ns - run.records[1].sent_ns < 2_000_000_000);
    }
}
