//! Key ordering: the rule the kernel enforces under `tailor agent --enforce priority`,
//! as a policy the simulator runs and as the functions the runtime's agent and jobs call.
//!
//! Each job's thread takes a SCHED_FIFO level from its key (the GAT or the deadline,
//! [`KeyField`]): [`level`] counts down from [`TOP_LEVEL`] at the key `base`, one level
//! per `bucket_ns` of key, so older keys sit higher; keys before `base` all share the
//! top level and keys more than `TOP_LEVEL - 1` buckets after it all share level 1. The
//! kernel runs the highest levels on the CPUs: at most `cpus` jobs run, FIFO within a
//! level, a job reaching a level above the lowest running one preempts that one, a
//! preempted job goes back to the head of its level's list and a waking one to the tail;
//! equal levels never preempt. Nothing is time-sliced.
//!
//! `base` moves only forward, and only when new keys run out of levels: when the newest
//! live key maps at or below [`SHIFT_LEVEL`], [`base_after_pass`] moves it so that the
//! oldest live key sits at the top, or (if the live keys span more than the window
//! allows) so that the newest has [`ROOM_LEVEL`] levels below the top. Every level rises
//! or stays, so no two jobs swap order; jobs whose level changes join the tail of their
//! new level, in their old order. Keys more than [`KEY_HORIZON_NS`] past `now` (a distant
//! deadline) never move the base.
//!
//! [`Keyed`] is that rule as a [`Policy`]. Where it differs from the kernel: it applies a
//! shift at the arrival that calls for it (the agent does so at its next pass, a few µs
//! later), re-levels jobs in the order of their old levels (the agent in slot order), and
//! preempts, among the lowest running levels, the most recently started job (the kernel
//! picks a CPU by its own topology rules).
//!
//! What key ordering cannot express: anything that is not one static key per job with
//! every CPU busy while jobs wait. orf's limited processor sharing among more jobs than
//! CPUs (`c` > CPUs) needs time slices; rr, ps and fair rotate; priq, fifo, lifo and
//! random order by something other than a GAT or a deadline ([`key_field_of`]).

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::{Job, JobId, Policy, PolicySpec};
use crate::time::{Nanos, NEVER};

/// The highest level a key maps to (the oldest jobs). Levels run 1..=TOP; the runtime
/// keeps them below its I/O threads and far below the kernel's threaded IRQs (50).
pub const TOP_LEVEL: i32 = 40;
/// A job whose key maps at or below this level asks for a shift of `base`.
pub const SHIFT_LEVEL: i32 = 4;
/// After a shift the newest live key sits at least this many levels above the bottom, so
/// keys may advance `ROOM_LEVEL - SHIFT_LEVEL` buckets before the next shift.
pub const ROOM_LEVEL: i32 = TOP_LEVEL / 2;
/// Keys more than this past `now` do not move the base. GATs are never in the future
/// (every hop clamps them); deadlines are, by up to an SLO.
pub const KEY_HORIZON_NS: Nanos = 10_000_000_000;

/// Which field of a [`Job`] is its key. The discriminants are the kernel table's
/// encoding of `Header::key` (docs/kernel-table-protocol.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u32)]
pub enum KeyField {
    /// Global arrival time: the order of orf (c = CPUs) and gfifo.
    #[default]
    Gat = 0,
    /// Absolute deadline: the order of edf.
    Deadline = 1,
}

impl KeyField {
    /// The key of `job`.
    #[inline]
    pub fn of(self, job: &Job) -> Nanos {
        match self {
            KeyField::Gat => job.gat,
            KeyField::Deadline => job.deadline,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            KeyField::Gat => "gat",
            KeyField::Deadline => "deadline",
        }
    }
}

/// The level of a job with `key` when `base` maps to [`TOP_LEVEL`]: one level lower per
/// whole `bucket_ns` after `base`, clamped to 1..=TOP (keys before `base` are all
/// "oldest").
#[inline]
pub fn level(key: Nanos, base: Nanos, bucket_ns: Nanos) -> i32 {
    let steps = key.saturating_sub(base) / bucket_ns.max(1);
    (TOP_LEVEL as u64).saturating_sub(steps).max(1) as i32
}

/// Whether `key` may move the base at time `now` (see [`KEY_HORIZON_NS`]).
#[inline]
pub fn in_horizon(key: Nanos, now: Nanos) -> bool {
    key <= now.saturating_add(KEY_HORIZON_NS)
}

/// Where `base` goes when the newest live key has run out of levels: the oldest live key
/// at the top if the window holds every live key with [`ROOM_LEVEL`] levels to spare below
/// the newest, else as far forward as that room needs (the oldest keys then share the
/// top level). Always forward: a triggered shift moves it at least
/// `ROOM_LEVEL - SHIFT_LEVEL` buckets.
pub fn shifted_base(base: Nanos, oldest: Nanos, newest: Nanos, bucket_ns: Nanos) -> Nanos {
    let span = (TOP_LEVEL - ROOM_LEVEL) as u64 * bucket_ns;
    base.max(oldest.max(newest.saturating_sub(span)))
}

/// One pass of the base rule: given the oldest and newest live keys within the horizon,
/// the new base if the newest has reached [`SHIFT_LEVEL`], else `None` (no shift).
pub fn base_after_pass(base: Nanos, oldest: Nanos, newest: Nanos, bucket_ns: Nanos) -> Option<Nanos> {
    (level(newest, base, bucket_ns) <= SHIFT_LEVEL).then(|| shifted_base(base, oldest, newest, bucket_ns))
}

/// Why a policy cannot be enforced by key ordering.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyOrderError {
    /// orf shares the CPUs among `c` jobs in slices; key ordering runs exactly `cpus`.
    #[error("orf with c = {c} on {cpus} CPUs: key ordering runs the {cpus} oldest jobs (c = CPUs); orf's processor sharing among more jobs than CPUs needs time slices")]
    OrfCNotCpus { c: usize, cpus: usize },
    /// The policy does not order jobs by one static key.
    #[error(
        "{policy} does not order jobs by one static key; key ordering supports orf (c = CPUs), gfifo, edf and keyed"
    )]
    NotKeyed { policy: &'static str },
}

/// The key by which key ordering enforces `policy` on `cpus` CPUs, or why it cannot.
pub fn key_field_of(policy: &PolicySpec, cpus: usize) -> Result<KeyField, KeyOrderError> {
    match policy {
        PolicySpec::Orf { c, .. } if *c == cpus => Ok(KeyField::Gat),
        PolicySpec::Orf { c, .. } => Err(KeyOrderError::OrfCNotCpus { c: *c, cpus }),
        PolicySpec::Gfifo => Ok(KeyField::Gat),
        PolicySpec::Edf => Ok(KeyField::Deadline),
        PolicySpec::Keyed { key, .. } => Ok(*key),
        other => Err(KeyOrderError::NotKeyed { policy: other.name() }),
    }
}

/// The policy key ordering actually runs for `policy` on `cpus` CPUs with `bucket_ns` of
/// key per level: what the simulator must run to predict the kernel mode.
pub fn keyed_spec_of(policy: &PolicySpec, cpus: usize, bucket_ns: Nanos) -> Result<PolicySpec, KeyOrderError> {
    Ok(PolicySpec::Keyed { key: key_field_of(policy, cpus)?, bucket_us: bucket_ns as f64 / 1e3 })
}

/// Where a held job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    Cpu(usize),
    Waiting,
    Blocked,
}

#[derive(Clone, Copy, Debug)]
struct Held {
    key: Nanos,
    /// Always `level(key, base, bucket_ns)`.
    level: i32,
    at: At,
}

/// Key ordering as a policy: see the module doc.
#[derive(Clone, Debug)]
pub struct Keyed {
    key: KeyField,
    bucket_ns: Nanos,
    base: Nanos,
    running: Vec<Option<JobId>>,
    /// When each CPU's job started (a dispatch counter): whom a preemption picks.
    started: Vec<u64>,
    dispatches: u64,
    /// Waiting jobs by level (index 0 unused), FIFO.
    levels: Vec<VecDeque<JobId>>,
    waiting: usize,
    jobs: HashMap<JobId, Held>,
    /// Keys of every held job (running, waiting, blocked) with their counts: the live keys
    /// the base rule looks at.
    live_keys: BTreeMap<Nanos, u32>,
}

impl Keyed {
    /// Key ordering on `cpus` CPUs by `key`, `bucket_ns` of key per level.
    pub fn new(cpus: usize, key: KeyField, bucket_ns: Nanos) -> Self {
        assert!(cpus > 0, "a policy needs at least one CPU");
        Keyed {
            key,
            bucket_ns: bucket_ns.max(1),
            base: 0,
            running: vec![None; cpus],
            started: vec![0; cpus],
            dispatches: 0,
            levels: vec![VecDeque::new(); TOP_LEVEL as usize + 1],
            waiting: 0,
            jobs: HashMap::new(),
            live_keys: BTreeMap::new(),
        }
    }

    /// The key that maps to [`TOP_LEVEL`] now.
    pub fn base(&self) -> Nanos {
        self.base
    }

    /// The level job `id` holds, if the policy holds it (running, waiting or blocked).
    pub fn level_of(&self, id: JobId) -> Option<i32> {
        self.jobs.get(&id).map(|h| h.level)
    }

    pub fn key_field(&self) -> KeyField {
        self.key
    }

    pub fn bucket_ns(&self) -> Nanos {
        self.bucket_ns
    }

    /// The agent's pass after a job rang: moves the base if the newest live key within
    /// the horizon has run out of levels, re-levelling every held job.
    fn pass(&mut self, now: Nanos) {
        let Some((&newest, _)) = self.live_keys.range(..=now.saturating_add(KEY_HORIZON_NS)).next_back() else {
            return;
        };
        let oldest = *self.live_keys.keys().next().expect("newest is a live key");
        if let Some(new_base) = base_after_pass(self.base, oldest, newest, self.bucket_ns) {
            self.shift(new_base);
        }
    }

    /// Moves the base to `new_base`: levels only rise, and waiting jobs whose level
    /// changes join the tail of their new level in the order they held (top level first,
    /// FIFO within one), so no two jobs swap order.
    fn shift(&mut self, new_base: Nanos) {
        self.base = new_base;
        let (base, bucket) = (self.base, self.bucket_ns);
        for held in self.jobs.values_mut() {
            if held.at != At::Waiting {
                held.level = level(held.key, base, bucket);
            }
        }
        for l in (1..=TOP_LEVEL).rev() {
            let list = std::mem::take(&mut self.levels[l as usize]);
            for id in list {
                let held = self.jobs.get_mut(&id).expect("a listed job is held");
                held.level = level(held.key, base, bucket);
                debug_assert!(held.level >= l, "a shift only raises levels");
                self.levels[held.level as usize].push_back(id);
            }
        }
    }

    fn highest_waiting(&self) -> Option<i32> {
        (1..=TOP_LEVEL).rev().find(|&l| !self.levels[l as usize].is_empty())
    }

    fn enqueue_tail(&mut self, id: JobId, level: i32) {
        self.levels[level as usize].push_back(id);
        self.waiting += 1;
    }

    fn start(&mut self, cpu: usize, id: JobId) {
        self.running[cpu] = Some(id);
        self.dispatches += 1;
        self.started[cpu] = self.dispatches;
        self.jobs.get_mut(&id).expect("a dispatched job is held").at = At::Cpu(cpu);
    }

    /// What the kernel's RT scheduler does after any change: idle CPUs take the head of
    /// the highest waiting level; while that level is above the lowest running one, it
    /// preempts that job (the latest started among equals), which goes back to the head
    /// of its level.
    fn dispatch(&mut self) {
        while let Some(top) = self.highest_waiting() {
            let cpu = match self.running.iter().position(Option::is_none) {
                Some(cpu) => cpu,
                None => {
                    let (cpu, lowest) = (0..self.running.len())
                        .map(|cpu| (cpu, self.jobs[&self.running[cpu].expect("no CPU idle")].level))
                        .min_by_key(|&(cpu, l)| (l, std::cmp::Reverse(self.started[cpu])))
                        .expect("at least one CPU");
                    if lowest >= top {
                        return;
                    }
                    let victim = self.running[cpu].take().expect("running");
                    self.jobs.get_mut(&victim).expect("held").at = At::Waiting;
                    self.levels[lowest as usize].push_front(victim);
                    self.waiting += 1;
                    cpu
                }
            };
            let id = self.levels[top as usize].pop_front().expect("non-empty level");
            self.waiting -= 1;
            self.start(cpu, id);
        }
    }

    /// Takes job `id` off its CPU (block or complete).
    fn off_cpu(&mut self, id: JobId) -> Option<Held> {
        let held = self.jobs.get(&id).copied()?;
        if let At::Cpu(cpu) = held.at {
            self.running[cpu] = None;
        } else {
            debug_assert!(false, "job {id} left a CPU it was not on");
        }
        Some(held)
    }
}

impl Policy for Keyed {
    fn name(&self) -> &'static str {
        "keyed"
    }

    fn arrive(&mut self, now: Nanos, job: Job) {
        let key = self.key.of(&job);
        let level = level(key, self.base, self.bucket_ns);
        self.jobs.insert(job.id, Held { key, level, at: At::Waiting });
        *self.live_keys.entry(key).or_insert(0) += 1;
        self.enqueue_tail(job.id, level);
        // A job with no key (no deadline under edf) belongs at the bottom and rings nobody.
        if level <= SHIFT_LEVEL && key != NEVER {
            self.pass(now);
        }
        self.dispatch();
    }

    fn block(&mut self, _now: Nanos, id: JobId) {
        if self.off_cpu(id).is_some() {
            self.jobs.get_mut(&id).expect("held").at = At::Blocked;
        }
        self.dispatch();
    }

    fn wake(&mut self, _now: Nanos, job: Job) {
        // The thread kept its level while blocked (shifts rewrote it); a wake-up joins the
        // tail of that level.
        let Some(held) = self.jobs.get_mut(&job.id) else { return };
        debug_assert_eq!(held.at, At::Blocked, "job {} woke but was not blocked", job.id);
        held.at = At::Waiting;
        let level = held.level;
        self.enqueue_tail(job.id, level);
        self.dispatch();
    }

    fn complete(&mut self, _now: Nanos, id: JobId) {
        if let Some(held) = self.off_cpu(id) {
            self.jobs.remove(&id);
            if let std::collections::btree_map::Entry::Occupied(mut e) = self.live_keys.entry(held.key) {
                *e.get_mut() -= 1;
                if *e.get() == 0 {
                    e.remove();
                }
            }
        }
        self.dispatch();
    }

    fn tick(&mut self, _now: Nanos) {}

    fn running(&self) -> &[Option<JobId>] {
        &self.running
    }

    fn next_tick(&self) -> Option<Nanos> {
        None
    }

    fn waiting(&self) -> usize {
        self.waiting
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: JobId, gat: Nanos) -> Job {
        Job::with_gat(id, gat)
    }

    #[test]
    fn only_policies_with_one_static_key_run_under_key_ordering() {
        assert_eq!(key_field_of(&PolicySpec::Orf { c: 2, slice_us: 500.0 }, 2), Ok(KeyField::Gat));
        assert_eq!(key_field_of(&PolicySpec::Gfifo, 2), Ok(KeyField::Gat));
        assert_eq!(key_field_of(&PolicySpec::Edf, 2), Ok(KeyField::Deadline));
        let keyed = PolicySpec::Keyed { key: KeyField::Deadline, bucket_us: 10.0 };
        assert_eq!(key_field_of(&keyed, 3), Ok(KeyField::Deadline));
        assert_eq!(
            key_field_of(&PolicySpec::Orf { c: 6, slice_us: 500.0 }, 2),
            Err(KeyOrderError::OrfCNotCpus { c: 6, cpus: 2 })
        );
        assert_eq!(key_field_of(&PolicySpec::Rr { slice_us: 500.0 }, 2), Err(KeyOrderError::NotKeyed { policy: "rr" }));
        assert_eq!(
            keyed_spec_of(&PolicySpec::Orf { c: 2, slice_us: 30.0 }, 2, 1_500_000),
            Ok(PolicySpec::Keyed { key: KeyField::Gat, bucket_us: 1500.0 })
        );
        // The table's encoding of the key.
        assert_eq!((KeyField::Gat as u32, KeyField::Deadline as u32), (0, 1));
    }

    #[test]
    fn levels_fall_one_per_bucket_from_the_top_and_clamp() {
        let q = 1_000;
        assert_eq!(level(5_000, 5_000, q), TOP_LEVEL);
        assert_eq!(level(4_000, 5_000, q), TOP_LEVEL, "older than base: top");
        assert_eq!(level(5_999, 5_000, q), TOP_LEVEL, "same bucket");
        assert_eq!(level(6_000, 5_000, q), TOP_LEVEL - 1);
        assert_eq!(level(5_000 + 39 * q, 5_000, q), 1);
        assert_eq!(level(u64::MAX, 5_000, q), 1, "clamped at the bottom");
    }

    #[test]
    fn a_shift_gives_the_newest_key_room_and_never_reorders() {
        let q = 1_000_000;
        // Newest key at the shift level: it moves up to at least ROOM_LEVEL.
        let base = 0;
        let newest = (TOP_LEVEL - SHIFT_LEVEL) as u64 * q;
        assert_eq!(level(newest, base, q), SHIFT_LEVEL);
        let oldest = 3 * q;
        let b = shifted_base(base, oldest, newest, q);
        assert_eq!(b, newest - (TOP_LEVEL - ROOM_LEVEL) as u64 * q, "room wins over the oldest");
        assert_eq!(level(newest, b, q), ROOM_LEVEL);
        assert_eq!(base_after_pass(base, oldest, newest, q), Some(b));
        assert_eq!(base_after_pass(base, oldest, newest - q, q), None, "above the shift level: no shift");
        // All live keys close together: the oldest goes to the top.
        let b = shifted_base(0, newest - 2 * q, newest, q);
        assert_eq!((level(newest - 2 * q, b, q), level(newest, b, q)), (TOP_LEVEL, TOP_LEVEL - 2));
        // Property: for any keys, a shift keeps every pair's order (older never lower).
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..10_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let (k1, k2, old_base) = (rng % (100 * q), (rng >> 20) % (100 * q), (rng >> 40) % (50 * q));
            let (lo, hi) = (k1.min(k2), k1.max(k2));
            let new_base = shifted_base(old_base, lo, hi, q);
            assert!(new_base >= old_base);
            assert!(level(lo, new_base, q) >= level(hi, new_base, q));
            assert!(level(lo, new_base, q) >= level(lo, old_base, q), "levels only rise");
        }
    }

    #[test]
    fn an_older_job_preempts_the_youngest_and_equal_levels_wait_in_fifo_order() {
        let q = 1_000;
        let mut p = Keyed::new(2, KeyField::Gat, q);
        p.arrive(0, job(1, 5 * q));
        p.arrive(0, job(2, 6 * q));
        assert_eq!(p.running(), [Some(1), Some(2)]);
        // Same bucket as job 2: waits behind it, no preemption.
        p.arrive(0, job(3, 6 * q + 10));
        assert_eq!((p.running(), p.waiting()), (&[Some(1), Some(2)][..], 1));
        // Older than both: preempts the lowest level (job 2), which goes to the head of
        // its level, ahead of job 3.
        p.arrive(0, job(4, q));
        assert_eq!(p.running(), [Some(1), Some(4)]);
        p.complete(0, 1);
        assert_eq!(p.running(), [Some(2), Some(4)], "the preempted job first");
        p.complete(0, 4);
        assert_eq!(p.running(), [Some(2), Some(3)]);
        // A blocked job keeps its level; on waking it preempts a lower one.
        p.arrive(0, job(5, 20 * q));
        p.block(0, 2);
        assert_eq!(p.running(), [Some(5), Some(3)]);
        p.wake(0, job(2, 6 * q));
        assert_eq!(p.running(), [Some(2), Some(3)], "job 5 (lowest level) preempted");
        assert_eq!((p.waiting(), p.next_tick()), (1, None));
    }

    #[test]
    fn the_base_moves_when_keys_run_out_of_levels_and_never_reorders() {
        let q = 1_000;
        let mut p = Keyed::new(1, KeyField::Gat, q);
        p.arrive(0, job(1, 0));
        p.arrive(0, job(2, 10 * q));
        assert_eq!((p.base(), p.level_of(2)), (0, Some(TOP_LEVEL - 10)));
        // At the shift level: the base moves to the oldest live key (0: it stays) or far
        // enough to give the newest ROOM_LEVEL levels.
        let newest = (TOP_LEVEL - SHIFT_LEVEL) as u64 * q;
        p.arrive(newest, job(3, newest));
        assert_eq!(p.base(), newest - (TOP_LEVEL - ROOM_LEVEL) as u64 * q);
        assert_eq!(p.level_of(3), Some(ROOM_LEVEL));
        assert_eq!((p.level_of(1), p.level_of(2)), (Some(TOP_LEVEL), Some(TOP_LEVEL)), "old keys share the top");
        // Job 2 is still served before job 3, job 1 first.
        assert_eq!(p.running(), [Some(1)]);
        p.complete(newest, 1);
        assert_eq!(p.running(), [Some(2)]);
        // A key past the horizon rings but does not move the base.
        let far = newest + KEY_HORIZON_NS + 1;
        let base = p.base();
        p.arrive(newest, job(4, far));
        assert_eq!((p.base(), p.level_of(4)), (base, Some(1)));
    }
}
