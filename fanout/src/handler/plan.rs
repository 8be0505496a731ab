//! Deadlines: the planner's learned CDFs, refreshed off the query path; x_p^u per server set; sequential-request plans.

use super::*;

/// Grid cells of a sequential plan's convolution (core's `sum_quantile`). Cost
/// is O(grid²) flops whatever M is; 2048 keeps one plan to a few ms (core's
/// default 8192 took tens of ms), and the bracket on x_p^{R,u} stays within
/// M·ΣT_i/2048, and the plan uses its upper end (the conservative side).
pub const PLAN_GRID: usize = 2048;

/// At most this many request shapes (class, fan-outs, split) get a plan: each
/// one is recomputed at every refresh, so the refresh cost is bounded too.
pub const MAX_PLANS: usize = 64;

/// The budget plans of the request shapes seen so far, and the per-server CDFs
/// they were computed from. Requests only look plans up here (a linear scan of
/// at most [`MAX_PLANS`] entries, no allocation); plans are computed with no
/// lock held and swapped in.
pub(super) struct Plans {
    pub(super) cdfs: Arc<Vec<SharedCdf>>,
    pub(super) entries: Vec<(PlanKey, Arc<SequentialPlan>)>,
}

impl Plans {
    pub(super) fn find(&self, class: u8, fanouts: &[u32], proportional: bool) -> Option<Arc<SequentialPlan>> {
        self.entries
            .iter()
            .find(|((c, ks, p), _)| *c == class && *p == proportional && ks[..] == *fanouts)
            .map(|(_, plan)| plan.clone())
    }
}

/// (class, fan-outs, proportional split?) of a cached sequential plan.
pub(super) type PlanKey = (u8, Vec<u32>, bool);

impl Handler {
    /// Rebuilds the planner from the learned CDFs every `cfg.refresh` (tokio
    /// task). The rebuild (and the sequential plans, ms each) runs on the
    /// blocking pool so it never occupies a worker that serves queries.
    pub fn spawn_refresher(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        let every = self.cfg.refresh;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(h) = weak.upgrade() else { return };
                let _ = tokio::task::spawn_blocking(move || {
                    // Milliseconds of planning: never in the RT band the query path may run in.
                    crate::timer::normal_priority();
                    h.refresh_planner()
                })
                .await;
            }
        })
    }

    /// Computes one plan on `cdfs` (no lock held) and counts its cost.
    pub(super) fn compute_plan(&self, cdfs: &[SharedCdf], key: &PlanKey) -> Result<SequentialPlan, PlannerError> {
        let started = Instant::now();
        let (class, fanouts, proportional) = key;
        let split = if *proportional { BudgetSplit::Proportional } else { BudgetSplit::Equal };
        let queries: Vec<WorstCaseMax<SharedCdf>> =
            fanouts.iter().map(|&k| WorstCaseMax { servers: cdfs, k }).collect();
        let plan = SequentialPlan::new(self.cfg.classes[*class as usize], &queries, split, PLAN_GRID);
        self.stats.plan_computes.fetch_add(1, Ordering::Relaxed);
        self.stats.plan_compute_ns.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        plan
    }

    /// Checks a request shape, computes its plan (no lock held) if it has none
    /// yet, and keeps it refreshed from then on. Call it for every request
    /// shape before sending load, so no request computes a plan.
    pub fn prepare_request(
        &self,
        class: u8,
        fanouts: &[u32],
        split: BudgetSplit,
    ) -> Result<Arc<SequentialPlan>, QueryError> {
        let n = self.cfg.servers.len();
        if class as usize >= self.cfg.classes.len() {
            return Err(QueryError::NoSuchClass { class, classes: self.cfg.classes.len() });
        }
        if fanouts.is_empty() {
            return Err(QueryError::Plan("a request needs at least one query (fan-outs are empty)".into()));
        }
        if let Some(&k) = fanouts.iter().find(|&&k| k == 0 || k as usize > n) {
            return Err(QueryError::BadFanout { fanout: k, servers: n });
        }
        let proportional = split == BudgetSplit::Proportional;
        let cdfs = {
            let plans = self.plans.lock().expect("plans poisoned");
            if let Some(p) = plans.find(class, fanouts, proportional) {
                return Ok(p);
            }
            if plans.entries.len() >= MAX_PLANS {
                return Err(QueryError::Plan(format!(
                    "more than {MAX_PLANS} request shapes (class, fan-outs, split): each is re-planned at every refresh; use fewer"
                )));
            }
            plans.cdfs.clone()
        };
        let key = (class, fanouts.to_vec(), proportional);
        let plan = Arc::new(self.compute_plan(&cdfs, &key).map_err(|e| QueryError::Plan(e.to_string()))?);
        let mut plans = self.plans.lock().expect("plans poisoned");
        // Another caller may have planned the same shape meanwhile: keep one.
        if let Some(p) = plans.find(class, fanouts, proportional) {
            return Ok(p);
        }
        if plans.entries.len() < MAX_PLANS {
            plans.entries.push((key, plan.clone()));
        }
        Ok(plan)
    }

    /// The current plan of a request shape, if it has one (a lookup only).
    pub fn current_plan(&self, class: u8, fanouts: &[u32], split: BudgetSplit) -> Option<Arc<SequentialPlan>> {
        self.plans.lock().expect("plans poisoned").find(class, fanouts, split == BudgetSplit::Proportional)
    }

    /// Samples a learned CDF needs before the planner may use it: ten beyond the
    /// quantile that decides the deadline of the largest fan-out, p^(1/k) for the
    /// strictest class percentile p (the slowest of k tasks is under x with
    /// probability F(x)^k). p = 0.99: k = 32 needs ~32,000, k = 100 ~100,000.
    pub fn tail_samples(classes: &[SloClass], max_fanout: u32) -> f64 {
        let p = classes.iter().map(|c| c.p).fold(0.0, f64::max).clamp(0.5, 0.999_999);
        10.0 / (1.0 - p.powf(1.0 / max_fanout.max(1) as f64))
    }

    /// One online update (§III.B.2): each server gets its own learned CDF if it
    /// has `min_samples`, else the pool's if that has, else the offline one.
    pub fn refresh_planner(&self) {
        let n = self.cfg.servers.len();
        let min = self.cfg.min_samples;
        let mut pool = LatencyHistogram::new();
        let own: Vec<Option<SharedCdf>> = self
            .learned
            .iter()
            .map(|h| {
                let mut h = h.lock().expect("histogram poisoned");
                pool.merge(&h);
                let cdf: Option<SharedCdf> = (h.count() >= min).then(|| Arc::new(h.snapshot()) as SharedCdf);
                if h.count() >= 2.0 * min {
                    h.decay(0.5);
                }
                cdf
            })
            .collect();
        let pooled: Option<SharedCdf> = (pool.count() >= min).then(|| Arc::new(pool.snapshot()) as SharedCdf);
        let (mean, var) = if pooled.is_some() { (pool.mean(), pool.variance()) } else { (0.0, 0.0) };
        self.pooled_moments.0.store(mean.to_bits(), Ordering::Relaxed);
        self.pooled_moments.1.store(var.to_bits(), Ordering::Relaxed);
        let on_own = own.iter().filter(|c| c.is_some()).count();
        self.stats.servers_on_own_cdf.store(on_own as u64, Ordering::Relaxed);
        self.stats
            .servers_on_pooled_cdf
            .store(if pooled.is_some() { (n - on_own) as u64 } else { 0 }, Ordering::Relaxed);
        let cdfs: Vec<SharedCdf> = own
            .into_iter()
            .enumerate()
            .map(|(s, c)| c.or_else(|| pooled.clone()).unwrap_or_else(|| self.cfg.offline_of(s)))
            .collect();
        // Built and precomputed off the lock; queries keep using the old one meanwhile.
        let Ok(mut fresh) = Planner::new(self.cfg.classes.clone(), TailModel::PerServer(cdfs.clone())) else { return };
        fresh.precompute(n as u32);
        // Same for the sequential plans: recomputed on the new CDFs with no
        // lock held; requests keep the old plans until the swap below.
        let keys: Vec<PlanKey> =
            self.plans.lock().expect("plans poisoned").entries.iter().map(|(k, _)| k.clone()).collect();
        let fresh_plans: Vec<(PlanKey, Arc<SequentialPlan>)> =
            keys.into_iter().filter_map(|k| self.compute_plan(&cdfs, &k).ok().map(|p| (k, Arc::new(p)))).collect();
        *self.planner.lock().expect("planner poisoned") = fresh;
        {
            let mut plans = self.plans.lock().expect("plans poisoned");
            plans.cdfs = Arc::new(cdfs);
            for (key, plan) in fresh_plans {
                if let Some(slot) = plans.entries.iter_mut().find(|(k, _)| *k == key) {
                    slot.1 = plan;
                }
            }
        }
        self.placement_tails.lock().expect("placement tails poisoned").clear();
        self.stats.planner_refreshes.fetch_add(1, Ordering::Relaxed);
    }

    /// Most server sets whose x_p^u is remembered between refreshes.
    pub(super) const PLACEMENT_MEMO: usize = 4096;

    /// x_p^u of one query of `class` whose tasks go to exactly `servers`:
    /// TailGuard Eq. 1–2 over the query's own n(k), Π F_l(t) ≥ p, on the
    /// current CDFs. [`Handler::unloaded_tail`] is the k slowest servers'
    /// instead, which gives a query on fast servers the slow ones' budget.
    /// The same sets recur (each server at k = 1, all of them at k = N), so
    /// results are kept until the CDFs change.
    pub fn unloaded_tail_of(&self, class: u8, servers: &[usize]) -> Nanos {
        // Key: [class, the servers sorted].
        let mut key: Vec<u16> = std::iter::once(u16::from(class)).chain(servers.iter().map(|&s| s as u16)).collect();
        key[1..].sort_unstable();
        if let Some(&x) = self.placement_tails.lock().expect("placement tails poisoned").get(key.as_slice()) {
            return x;
        }
        let cdfs = self.plans.lock().expect("plans poisoned").cdfs.clone();
        let chosen: Vec<&SharedCdf> = key[1..].iter().map(|&s| &cdfs[s as usize]).collect();
        let x = tailor_core::tailguard::unloaded_quantile(&chosen, self.cfg.classes[class as usize].p);
        let mut memo = self.placement_tails.lock().expect("placement tails poisoned");
        // Only if the CDFs are still the ones used: a refresh in between cleared the memo.
        if Arc::ptr_eq(&cdfs, &self.plans.lock().expect("plans poisoned").cdfs) {
            if memo.len() >= Self::PLACEMENT_MEMO {
                memo.clear();
            }
            memo.insert(key, x);
        }
        x
    }

    /// x_p^u(k) for a class as the planner currently estimates it.
    pub fn unloaded_tail(&self, class: u8, fanout: u32) -> Nanos {
        self.planner.lock().expect("planner poisoned").unloaded_tail(class, fanout)
    }
}
