//! The sidecar's gate: requests wait in the core policy's order and at most `limit` are
//! inside the service at once.
//!
//! The policy is a core [`Policy`] built for `c_max` CPUs and driven like the runtime's
//! cooperative backend drives its own: `running()` is the set allowed into the service.
//! The limit moves (the adaptive limit) without rebuilding the policy: CPUs the limit does
//! not allow are held by *ghost* jobs. Raising the limit completes a ghost (the policy
//! hands its CPU to the best waiting request); lowering it submits a ghost with the most
//! urgent key, so the next CPU to free goes to the ghost. A request that leaves while
//! waiting (client gone, deadline passed) cannot be taken out of a policy, so it stays
//! as a *stale* entry that is completed the moment it is dispatched; when stale entries
//! pile up the policy is rebuilt from the live jobs, so memory stays bounded.

use std::sync::{Arc, Mutex, MutexGuard};

use rustc_hash::{FxHashMap, FxHashSet};
use tailor_core::policy::{AnyPolicy, Job, JobId, Policy};
use tailor_core::{Context, Nanos};
use tokio::sync::oneshot;

use crate::config::Order;
use crate::limit::Adaptive;

/// Why a request was not let in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShedReason {
    /// Its deadline had passed (on arrival or while it waited).
    DeadlineExpired,
    /// At its queue position it would finish after its deadline.
    CannotMeet,
    /// The queue is at `max_queue`.
    QueueFull,
}

impl ShedReason {
    pub const ALL: [ShedReason; 3] = [ShedReason::DeadlineExpired, ShedReason::CannotMeet, ShedReason::QueueFull];

    /// Metric label and `tailor-shed` header value.
    pub fn as_str(self) -> &'static str {
        match self {
            ShedReason::DeadlineExpired => "deadline_expired",
            ShedReason::CannotMeet => "cannot_meet",
            ShedReason::QueueFull => "queue_full",
        }
    }
}

/// How many requests the gate lets into the service.
#[derive(Clone, Debug)]
pub enum Limit {
    Fixed(usize),
    Adaptive(Adaptive),
}

impl Limit {
    fn current(&self) -> usize {
        match self {
            Limit::Fixed(c) => *c,
            Limit::Adaptive(v) => v.limit(),
        }
    }
}

/// What the gate is configured with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateConfig {
    pub order: Order,
    /// `Some(c)`: fixed; `None`: adaptive up to `c_max`.
    pub c: Option<usize>,
    pub c_max: usize,
    pub max_queue: usize,
    pub shed_cannot_meet: bool,
}

const GHOST: JobId = 1 << 63;

struct State {
    policy: AnyPolicy,
    limit: Limit,
    /// Real jobs waiting, with how to wake them (`None` only while `enter` holds the
    /// lock: a request admitted on arrival never needs waking).
    waiting: FxHashMap<JobId, (Job, Option<oneshot::Sender<()>>)>,
    /// Real jobs inside the service, with the CPU the policy gave each (a hint: a
    /// rebuild may move them).
    admitted: FxHashMap<JobId, (Job, usize)>,
    /// Ids in the policy that nobody waits for any more.
    stale: FxHashSet<JobId>,
    ghosts_running: Vec<JobId>,
    ghosts_waiting: Vec<JobId>,
    next_id: JobId,
    /// Mean upstream latency (ns, EWMA) and how many samples made it.
    latency_ewma: f64,
    latency_samples: u64,
    /// Requests shed once in line or on arrival by the gate's own judgement (queue full,
    /// cannot meet, deadline passed while waiting): the adaptive limit's sign of overload.
    sheds: u64,
}

/// The gate. Cheap to share (`Arc`).
pub struct Gate {
    state: Mutex<State>,
    config: GateConfig,
}

/// A request inside the service; leaves the gate on drop (done, failed or cancelled).
pub struct Ticket {
    gate: Arc<Gate>,
    id: JobId,
    in_flight_at_start: usize,
    done: bool,
}

/// A request's place in line; resolves with [`Place::wait`]. Dropping it leaves the line.
pub struct Place {
    gate: Arc<Gate>,
    id: JobId,
    admission: Admission,
    /// Admitted and handed to a [`Ticket`], which now owns the slot.
    handed_over: bool,
}

/// How a place learns it was let in.
enum Admission {
    /// On arrival, with this many requests inside (itself included): no channel, no
    /// wake-up, no second lock.
    Now { in_flight: usize },
    /// Later: the gate sends on the channel when it dispatches the request.
    Later(oneshot::Receiver<()>),
    /// `wait` took it.
    Taken,
}

fn build(order: Order, cpus: usize) -> AnyPolicy {
    order.policy().build_any(cpus, 0).expect("gfifo/edf/priq/fifo build for any CPU count >= 1")
}

fn ghost_job(id: JobId) -> Job {
    // The most urgent key under every keyed order, so it takes the next free CPU.
    Job { id, gat: 0, deadline: 0, class: 0 }
}

impl Gate {
    pub fn new(config: GateConfig) -> Arc<Gate> {
        let c_max = config.c_max.max(config.c.unwrap_or(1));
        let limit = match config.c {
            Some(c) => Limit::Fixed(c),
            None => Limit::Adaptive(Adaptive::new(tailor_runtime::available_cpus() * 2, c_max)),
        };
        let mut st = State {
            policy: build(config.order, c_max),
            limit,
            waiting: FxHashMap::default(),
            admitted: FxHashMap::default(),
            stale: FxHashSet::default(),
            ghosts_running: Vec::new(),
            ghosts_waiting: Vec::new(),
            next_id: 1,
            latency_ewma: 0.0,
            latency_samples: 0,
            sheds: 0,
        };
        // The policy puts an arrival on its lowest free CPU and finds a completing job by
        // scanning its CPUs from the first; the gate finds an arrival's CPU the same way.
        // So the ghosts go on the highest CPUs and real requests run on the lowest ones:
        // those scans then stop within the limit instead of crossing the `c_max` (256)
        // CPUs, which in a profile of `tailor bench proxy --cost` was 14% of the sidecar's
        // user-space instructions per request. Placeholders keep the lowest CPUs while
        // the ghosts arrive, then leave.
        let limit = st.limit.current();
        let placeholders: Vec<JobId> = (0..limit as JobId).map(|i| st.next_id + i).collect();
        st.next_id += limit as JobId;
        for &id in &placeholders {
            st.policy.arrive(0, ghost_job(id));
        }
        for _ in limit..c_max {
            st.add_ghost(0);
        }
        for id in placeholders {
            st.policy.complete(0, id);
        }
        st.settle();
        Arc::new(Gate { state: Mutex::new(st), config: GateConfig { c_max, ..config } })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts the request of `ctx` in line at `now` (realtime ns, the clock GATs use).
    pub fn enter(self: &Arc<Gate>, ctx: &Context, now: Nanos) -> Result<Place, ShedReason> {
        if ctx.deadline <= now {
            return Err(ShedReason::DeadlineExpired);
        }
        let mut st = self.lock();
        if st.waiting.len() >= self.config.max_queue {
            st.sheds += 1;
            return Err(ShedReason::QueueFull);
        }
        let id = st.next_id;
        st.next_id += 1;
        let job = Job { id, gat: ctx.gat, deadline: ctx.deadline, class: ctx.class };
        if self.config.shed_cannot_meet && st.latency_samples >= 16 {
            if let Some(finish) = st.predicted_finish(self.config.order, &job, now) {
                if finish > ctx.deadline {
                    st.sheds += 1;
                    return Err(ShedReason::CannotMeet);
                }
            }
        }
        st.waiting.insert(id, (job, None));
        st.arrive(job);
        debug_assert!(st.is_settled());
        // Admitted on arrival (a free slot): settling moved it inside without a sender.
        let admission = match st.waiting.get_mut(&id) {
            None => Admission::Now { in_flight: st.admitted.len() },
            Some((_, sender)) => {
                let (tx, rx) = oneshot::channel();
                *sender = Some(tx);
                Admission::Later(rx)
            }
        };
        Ok(Place { gate: self.clone(), id, admission, handed_over: false })
    }

    /// Requests waiting, requests inside the service, the current limit.
    pub fn snapshot(&self) -> (usize, usize, usize) {
        let st = self.lock();
        (st.waiting.len(), st.admitted.len(), st.limit.current())
    }

    /// The adaptive limit's backlog floor; `None` for a fixed limit.
    pub fn limit_floor(&self) -> Option<usize> {
        match &self.lock().limit {
            Limit::Fixed(_) => None,
            Limit::Adaptive(adaptive) => Some(adaptive.floor()),
        }
    }

    fn leave(&self, id: JobId, rtt: Option<(Nanos, usize)>) {
        let mut st = self.lock();
        if let Some((_, cpu)) = st.admitted.remove(&id) {
            st.complete_on(id, cpu);
            if let Some((rtt, in_flight)) = rtt {
                st.sample(rtt, in_flight);
            }
        } else if st.waiting.remove(&id).is_some() {
            // Still in the policy's queue, holding no CPU: nothing to hand on until it is
            // dispatched (then `settle_cpu` completes it at once).
            st.stale.insert(id);
            if st.stale.len() > self.config.max_queue {
                st.rebuild(self.config.order, self.config.c_max);
                st.settle();
            }
        }
        debug_assert!(st.is_settled());
    }
}

impl State {
    fn add_ghost(&mut self, _now: Nanos) {
        let id = GHOST | self.next_id;
        self.next_id += 1;
        self.ghosts_waiting.push(id);
        self.arrive(ghost_job(id));
    }

    /// The CPU `id` runs on, if it runs.
    fn cpu_of(&self, id: JobId) -> Option<usize> {
        self.policy.running().iter().position(|r| *r == Some(id))
    }

    /// Puts `job` in the policy and settles the one CPU that can change. The orders are
    /// non-preemptive queues: an arrival either takes a free CPU or waits, and moves no
    /// other job.
    fn arrive(&mut self, job: Job) {
        let queued = self.policy.waiting();
        self.policy.arrive(0, job);
        if self.policy.waiting() == queued {
            if let Some(cpu) = self.cpu_of(job.id) {
                self.settle_cpu(cpu);
            }
        }
    }

    /// Completes the running `id`, last seen on `cpu`, and settles its CPU, the only one a
    /// completion can hand to another job: no search of the policy's CPUs when it is
    /// still there (it is, unless a rebuild moved it).
    fn complete_on(&mut self, id: JobId, cpu: usize) {
        let cpu = if self.policy.running().get(cpu) == Some(&Some(id)) { Some(cpu) } else { self.cpu_of(id) };
        self.finish(id, cpu);
    }

    fn finish(&mut self, id: JobId, cpu: Option<usize>) {
        self.policy.complete(0, id);
        if let Some(cpu) = cpu {
            self.settle_cpu(cpu);
        }
    }

    /// Hands CPU `cpu` to the job the policy dispatched there: wakes a real request,
    /// completes a stale entry at once (the CPU goes to the next), parks a ghost.
    fn settle_cpu(&mut self, cpu: usize) {
        while let Some(id) = self.policy.running()[cpu] {
            // Stale first: a cancelled ghost (a limit decrease undone) is stale too.
            if !self.stale.is_empty() && self.stale.remove(&id) {
                self.policy.complete(0, id);
                continue;
            }
            if id & GHOST != 0 {
                if let Some(i) = self.ghosts_waiting.iter().position(|g| *g == id) {
                    self.ghosts_waiting.swap_remove(i);
                    self.ghosts_running.push(id);
                }
            } else if let Some((job, tx)) = self.waiting.remove(&id) {
                self.admitted.insert(id, (job, cpu));
                // A receiver dropped meanwhile: its Place's drop calls leave, which
                // finds it admitted and gives the slot back. No sender: admitted on
                // arrival, inside `enter`, which sees it gone from `waiting`.
                if let Some(tx) = tx {
                    let _ = tx.send(());
                }
            }
            return;
        }
    }

    /// Whether every dispatched job has been handed its CPU (what `settle` establishes).
    fn is_settled(&self) -> bool {
        self.policy
            .running()
            .iter()
            .flatten()
            .all(|id| !self.stale.contains(id) && !self.waiting.contains_key(id) && !self.ghosts_waiting.contains(id))
    }

    /// Hands every CPU the policy has dispatched to its job: wakes real requests,
    /// completes stale entries at once (their CPU goes to the next), parks ghosts.
    /// Only after the policy was built or rebuilt: a request's arrival and completion
    /// settle the one CPU they can change (`arrive`, `complete`), since walking all
    /// `c_max` (256) CPUs twice per request was the gate's main cost in a profile of
    /// `tailor bench proxy --cost`.
    fn settle(&mut self) {
        loop {
            let mut changed = false;
            for cpu in 0..self.policy.running().len() {
                let Some(id) = self.policy.running()[cpu] else { continue };
                // Stale first: a cancelled ghost (a limit decrease undone) is stale too.
                if !self.stale.is_empty() && self.stale.remove(&id) {
                    self.policy.complete(0, id);
                    changed = true;
                } else if id & GHOST != 0 {
                    if let Some(i) = self.ghosts_waiting.iter().position(|g| *g == id) {
                        self.ghosts_waiting.swap_remove(i);
                        self.ghosts_running.push(id);
                    }
                } else if self.waiting.is_empty() {
                    continue;
                } else if let Some((job, tx)) = self.waiting.remove(&id) {
                    self.admitted.insert(id, (job, cpu));
                    // A receiver dropped meanwhile: its Place's drop calls leave, which
                    // finds it admitted and gives the slot back.
                    if let Some(tx) = tx {
                        let _ = tx.send(());
                    }
                }
            }
            if !changed {
                return;
            }
        }
    }

    fn set_limit(&mut self, new: usize) {
        let current = self.limit_in_policy();
        if new > current {
            for _ in current..new {
                // Cancel a pending decrease first, else free a held CPU.
                if let Some(g) = self.ghosts_waiting.pop() {
                    self.stale.insert(g);
                } else {
                    self.free_lowest_ghost();
                }
            }
        } else {
            for _ in new..current {
                self.add_ghost(0);
            }
        }
    }

    /// Completes the running ghost on the lowest CPU: the CPU it frees is the next a
    /// request takes, so requests stay on the lowest CPUs (see [`Gate::new`]). One scan
    /// of the CPUs, per limit raise only.
    fn free_lowest_ghost(&mut self) {
        let lowest = self.policy.running().iter().position(|r| r.is_some_and(|id| id & GHOST != 0));
        let Some(cpu) = lowest else { return };
        let ghost = self.policy.running()[cpu].expect("found running");
        match self.ghosts_running.iter().position(|g| *g == ghost) {
            Some(i) => {
                self.ghosts_running.swap_remove(i);
                self.finish(ghost, Some(cpu));
            }
            // Settled, every running ghost is in `ghosts_running`; never free a CPU twice.
            None => debug_assert!(false, "running ghost {ghost} not in ghosts_running"),
        }
    }

    /// The limit the ghosts currently enforce (or will, once the waiting ones are dispatched).
    fn limit_in_policy(&self) -> usize {
        let cpus = self.policy.running().len();
        cpus - self.ghosts_running.len() - self.ghosts_waiting.len()
    }

    fn sample(&mut self, rtt: Nanos, in_flight: usize) {
        self.latency_samples += 1;
        let a = if self.latency_samples < 16 { 1.0 / self.latency_samples as f64 } else { 0.05 };
        self.latency_ewma += a * (rtt as f64 - self.latency_ewma);
        if let Limit::Adaptive(adaptive) = &mut self.limit {
            let floor = adaptive.floor();
            let new = adaptive.on_sample(rtt, in_flight, self.waiting.len(), self.sheds);
            // At most once per backlog window (≥ 256 completions). A raise is news to an
            // operator (the service was held below what arrives), and so is a service found
            // full (the queue grows whatever the limit: an overload); a step down is routine.
            if adaptive.floor() > floor {
                tracing::info!(
                    floor = adaptive.floor(),
                    vegas = adaptive.vegas(),
                    waiting = self.waiting.len(),
                    "the gate's queue kept growing with nothing shed; concurrency limit floor raised"
                );
            } else if adaptive.floor() < floor && adaptive.at_capacity() {
                tracing::info!(
                    floor = adaptive.floor(),
                    vegas = adaptive.vegas(),
                    waiting = self.waiting.len(),
                    "higher limits bought no throughput (the service is full); concurrency limit floor back down"
                );
            } else if adaptive.floor() < floor {
                tracing::debug!(floor = adaptive.floor(), vegas = adaptive.vegas(), "concurrency limit floor lowered");
            }
            self.set_limit(new);
        }
    }

    /// When `job` would finish if it joined the queue now: the requests ahead of it
    /// (by the order's key) drain at the service's throughput, `limit` per mean latency
    /// (Little's law: the limit is full whenever anyone waits), then it takes one mean
    /// latency itself.
    ///
    /// The expected wait, not a bound: counting whole waves of `limit` (`ceil(ahead /
    /// limit)` latencies) charged a request one place back a whole extra latency, so at a
    /// limit of 20 on an I/O-bound service (5 ms off the CPU per request, 55 ms deadline)
    /// every request that had to wait at all was shed as soon as the mean latency passed
    /// a third of its deadline: 1.4–2.9k of 7–8k requests shed, 0–50 late, 10–19 points of
    /// goodput below a fixed `c` that let them wait (`tailor bench proxy --limit`, io, ρ 1.3).
    fn predicted_finish(&self, order: Order, job: &Job, now: Nanos) -> Option<Nanos> {
        let limit = self.limit.current().max(1);
        let ahead = self
            .waiting
            .values()
            .filter(|(w, _)| match order {
                Order::Orf => w.gat <= job.gat,
                Order::Edf => w.deadline <= job.deadline,
                Order::Priq => w.class <= job.class,
                Order::Fifo => true,
            })
            .count()
            + self.ghosts_waiting.len();
        let before_me = (self.admitted.len() + ahead + 1).saturating_sub(limit);
        if before_me == 0 {
            // It goes straight in: never shed on a guess then. A latency estimate from a
            // slow spell would otherwise shed every arrival for ever, since only admitted
            // requests give the samples that bring it down again.
            return None;
        }
        let waves = before_me as f64 / limit as f64;
        Some(now + ((waves + 1.0) * self.latency_ewma) as Nanos)
    }

    /// A fresh policy holding only live jobs: the admitted ones and held CPUs first (they
    /// take CPUs), then the waiting ones in arrival order (ids grow with arrival).
    fn rebuild(&mut self, order: Order, cpus: usize) {
        self.policy = build(order, cpus);
        self.stale.clear();
        let mut admitted: Vec<Job> = self.admitted.values().map(|&(job, _)| job).collect();
        admitted.sort_by_key(|j| j.id);
        for job in admitted {
            self.policy.arrive(0, job);
        }
        for &g in &self.ghosts_running {
            self.policy.arrive(0, ghost_job(g));
        }
        let mut later: Vec<Job> = self.waiting.values().map(|(j, _)| *j).collect();
        later.extend(self.ghosts_waiting.iter().map(|&g| ghost_job(g)));
        later.sort_by_key(|j| j.id & !GHOST);
        for job in later {
            self.policy.arrive(0, job);
        }
    }
}

impl Place {
    /// Waits for admission until `deadline` (realtime ns; `NEVER` waits for ever).
    pub async fn wait(mut self, deadline: Nanos) -> Result<Ticket, ShedReason> {
        let rx = match std::mem::replace(&mut self.admission, Admission::Taken) {
            Admission::Now { in_flight } => return Ok(self.hand_over(in_flight)),
            Admission::Later(rx) => rx,
            Admission::Taken => unreachable!("wait takes the place by value"),
        };
        let now = tailor_runtime::cpu::realtime_ns();
        let admitted = if deadline == tailor_core::time::NEVER {
            rx.await.is_ok()
        } else {
            let left = std::time::Duration::from_nanos(deadline.saturating_sub(now));
            matches!(tokio::time::timeout(left, rx).await, Ok(Ok(())))
        };
        if !admitted {
            self.gate.lock().sheds += 1;
            return Err(ShedReason::DeadlineExpired); // Place's drop leaves the line
        }
        let in_flight = self.gate.lock().admitted.len();
        Ok(self.hand_over(in_flight))
    }

    fn hand_over(&mut self, in_flight: usize) -> Ticket {
        self.handed_over = true;
        Ticket { gate: self.gate.clone(), id: self.id, in_flight_at_start: in_flight, done: false }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if !self.handed_over {
            self.gate.leave(self.id, None);
        }
    }
}

impl Ticket {
    /// The request is done; `rtt` is how long the service took (a sample for the limit).
    pub fn finish(mut self, rtt: Nanos) {
        self.done = true;
        self.gate.leave(self.id, Some((rtt, self.in_flight_at_start)));
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.done {
            self.gate.leave(self.id, None);
        }
    }
}

#[cfg(test)]
mod tests;
