//! Per query: pick the servers, stamp the deadline, send the tasks, and merge their replies (or time out naming who did not answer).

use super::*;

/// What a task server reported with a task's result.
#[derive(Clone, Copy, Debug)]
pub(super) struct TaskReply {
    pub(super) queue_ns: Nanos,
    pub(super) missed: bool,
    pub(super) service_ns: Nanos,
    /// Wall-clock arrival and dequeue at the server (0 if not reported).
    pub(super) arrived_at: Nanos,
    pub(super) dequeued_at: Nanos,
}

impl Handler {
    /// The servers of one query of `class` (validated: a class the handler has).
    pub(super) fn pick_servers(&self, class: u8, k: usize, seed: Option<u64>) -> Vec<usize> {
        let mut guard = self.picker.lock().expect("picker poisoned");
        let (rng, pickers) = &mut *guard;
        let mut own;
        let rng = match seed {
            Some(seed) => {
                own = Rng::derive(seed, PICK_STREAM);
                &mut own
            }
            None => rng,
        };
        pickers[class as usize].pick(rng, k).iter().map(|&i| i as usize).collect()
    }

    /// Runs one query: admission, deadline, fan-out, merge.
    pub async fn query(self: &Arc<Self>, q: QuerySpec) -> Result<QueryOutcome, QueryError> {
        let t0 = wall_ns();
        let started = Instant::now();
        let class = self
            .cfg
            .classes
            .get(q.class as usize)
            .copied()
            .ok_or(QueryError::NoSuchClass { class: q.class, classes: self.cfg.classes.len() })?;
        let n = self.cfg.servers.len();
        if q.fanout == 0 || q.fanout as usize > n {
            return Err(QueryError::BadFanout { fanout: q.fanout, servers: n });
        }
        // Per server, the query's own servers decide: pick them first.
        let servers = self.pick_servers(q.class, q.fanout as usize, q.seed);
        if let Some(a) = &self.admission {
            if let Err((ratio, r_th)) = a.admit(t0, Some(&servers), servers.len() as u64) {
                self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                return Err(QueryError::Rejected { ratio, r_th });
            }
        }
        let slo_ns = q.slo_ns.unwrap_or(class.slo_ns);
        let budget_ns = match self.cfg.scheme {
            Scheme::TEdfq => slo_ns as i64,
            _ => slo_ns as i64 - self.unloaded_tail_of(q.class, &servers) as i64,
        };
        let deadline = if budget_ns >= 0 { t0 + budget_ns as Nanos } else { t0 };
        let ctx = Context { gat: t0, deadline, class: q.class, fanout: q.fanout, hop: 1 };
        if self.cfg.admission.is_some_and(|a| a.reject_late) {
            let now = wall_ns();
            if let Some((server, wait, slack)) =
                self.late_server(&servers, self.queue_key(&ctx), now, deadline, class.p)
            {
                self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                self.stats.rejected_late.fetch_add(1, Ordering::Relaxed);
                return Err(QueryError::WouldMiss { server, wait_ms: wait as f64 / 1e6, slack_ms: slack as f64 / 1e6 });
            }
        }
        self.stats.admitted.fetch_add(1, Ordering::Relaxed);
        let until = self.timeout_after(started, slo_ns);
        let (missed, _, slowest) = self.fan_out_to(ctx, servers, q.seed, until).await?;
        Ok(QueryOutcome {
            latency_ns: started.elapsed().as_nanos() as Nanos,
            budget_ns,
            tasks_missed: missed,
            t0_wall: t0,
            slowest,
        })
    }

    /// Runs one request of sequential queries with the given fan-outs under
    /// `class`'s SLO (now a request SLO), splitting the request's queuing budget
    /// T_b^R across them (TailGuard Eq. 7; core's [`SequentialPlan`]): query i
    /// gets the remaining budget times its weight share, and whatever an earlier
    /// query left unused carries forward.
    pub async fn request(
        self: &Arc<Self>,
        class: u8,
        fanouts: &[u32],
        split: BudgetSplit,
    ) -> Result<RequestOutcome, QueryError> {
        let t0 = wall_ns();
        let started = Instant::now();
        let n = self.cfg.servers.len();
        if class as usize >= self.cfg.classes.len() {
            return Err(QueryError::NoSuchClass { class, classes: self.cfg.classes.len() });
        }
        if let Some(&k) = fanouts.iter().find(|&&k| k == 0 || k as usize > n) {
            return Err(QueryError::BadFanout { fanout: k, servers: n });
        }
        let plan = match self.current_plan(class, fanouts, split) {
            Some(p) => p,
            None => {
                // A shape nobody prepared: plan it now, once (no lock held).
                self.stats.plan_cold_misses.fetch_add(1, Ordering::Relaxed);
                self.prepare_request(class, fanouts, split)?
            }
        };
        // A request's later queries pick their servers as they go: per server, every
        // server must admit it.
        if let Some(a) = &self.admission {
            if let Err((ratio, r_th)) = a.admit(t0, None, fanouts.iter().map(|&k| u64::from(k)).sum()) {
                self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                return Err(QueryError::Rejected { ratio, r_th });
            }
        }
        self.stats.admitted.fetch_add(1, Ordering::Relaxed);
        let until = self.timeout_after(started, self.cfg.classes[class as usize].slo_ns);
        let (mut used, mut missed) = (0, 0);
        let mut queries = Vec::with_capacity(fanouts.len());
        for (i, &k) in fanouts.iter().enumerate() {
            let start = wall_ns();
            let d = plan.query_deadline(i, start, used);
            let ctx = Context { gat: t0, deadline: d.at, class, fanout: k, hop: 1 };
            let (m, pre, _) = self.fan_out(ctx, until).await?;
            queries.push(QueryDeadline { start_ns: start, deadline_ns: d.at, used_before_ns: used, used_ns: pre });
            missed += m;
            used += pre;
        }
        Ok(RequestOutcome {
            latency_ns: started.elapsed().as_nanos() as Nanos,
            budget_ns: plan.budget_ns(),
            tasks_missed: missed,
            plan,
            queries,
        })
    }

    /// Dispatches `ctx.fanout` tasks with `ctx`'s deadline and waits for all.
    /// Returns (tasks that missed, the query's pre-dequeuing time: the longest
    /// time any of its tasks waited before being dequeued, the slowest task's timeline).
    pub(super) async fn fan_out(
        self: &Arc<Self>,
        ctx: Context,
        until: Option<Instant>,
    ) -> Result<(u32, Nanos, TaskTrace), QueryError> {
        let servers = self.pick_servers(ctx.class, ctx.fanout as usize, None);
        self.fan_out_to(ctx, servers, None, until).await
    }

    /// When a query that started at `started` with SLO `slo_ns` times out, if it can.
    pub(super) fn timeout_after(&self, started: Instant, slo_ns: Nanos) -> Option<Instant> {
        self.cfg.query_timeout_slos.map(|m| started + Duration::from_nanos((slo_ns as f64 * m).min(1e18) as u64))
    }

    /// [`Handler::fan_out`] to servers already picked. With the query's
    /// `seed`, each task carries a work seed derived from it and its server.
    /// Ends at the first task error, or at `until` with [`QueryError::Timeout`]: the tasks
    /// still running are aborted, and their guards undo what they had registered.
    pub(super) async fn fan_out_to(
        self: &Arc<Self>,
        ctx: Context,
        servers: Vec<usize>,
        seed: Option<u64>,
        until: Option<Instant>,
    ) -> Result<(u32, Nanos, TaskTrace), QueryError> {
        let header = wire::encode(&ctx);
        let now = wall_ns();
        let key = self.queue_key(&ctx);
        // Which tasks are already known to miss (predicted misses; empty unless `predict`).
        let predict = self.cfg.admission.is_some_and(|a| a.predict);
        let mut predicted = vec![false; servers.len()];
        for (i, &s) in servers.iter().enumerate() {
            let mut out = self.outstanding[s].lock().expect("outstanding poisoned");
            if predict {
                let ahead = tasks_ahead(&out, key);
                predicted[i] = now.saturating_add(self.expected_wait(s, ahead)) > ctx.deadline;
            }
            *out.entry(key).or_default() += 1;
        }
        if let Some(a) = &self.admission {
            for (&s, &known) in servers.iter().zip(&predicted) {
                let mut a = a.of(s);
                // Centrally queued tasks are announced by `run_task` as they join the queue.
                if known {
                    a.record_task(now, true);
                }
            }
        }
        let mut set = tokio::task::JoinSet::new();
        for (i, (&s, &known)) in servers.iter().zip(&predicted).enumerate() {
            let h = self.clone();
            let work_seed = seed.map(|q| Rng::derive(q, WORK_STREAM + s as u64).next_u64());
            // Made here and moved in: dropped however the task ends, with its result or aborted
            // with the query, even before it first ran (a sibling's error aborts it unpolled).
            let outstanding = Outstanding { handler: h.clone(), server: s, key };
            set.spawn(async move {
                let _outstanding = outstanding;
                (i, h.run_task(s, ctx, header, work_seed, known, now).await)
            });
        }
        let (mut missed, mut pre) = (0u32, 0);
        let mut slowest = TaskTrace::default();
        let mut answered = vec![false; servers.len()];
        loop {
            let next = match until {
                Some(t) => match tokio::time::timeout_at(t.into(), set.join_next()).await {
                    Ok(next) => next,
                    Err(_) => return Err(self.timed_out(&servers, &answered, &predicted, now)),
                },
                None => set.join_next().await,
            };
            match next {
                None => return Ok((missed, pre, slowest)),
                Some(Ok((i, Ok((m, p, t))))) => {
                    answered[i] = true;
                    missed += u32::from(m);
                    pre = pre.max(p);
                    if t.received_at >= slowest.received_at {
                        slowest = t;
                    }
                }
                // The query has failed: the other tasks are aborted as `set` drops.
                Some(Ok((_, Err(e)))) => return Err(e),
                Some(Err(e)) => {
                    let server = servers.iter().zip(&answered).find(|(_, a)| !**a).map_or(0, |(s, _)| *s);
                    return Err(QueryError::Task { server: self.cfg.servers[server], error: TaskError::Join(e) });
                }
            }
        }
    }

    /// A query's timeout: its unanswered tasks count as missed for admission control (they
    /// were not back by their deadline, which lies before the timeout) unless counted at
    /// dispatch already (predicted), and the error names their servers. Centrally queued, a
    /// task released on time has its outcome counted with its result: the hung server's
    /// silence is that outcome (missed), which is what lets the ratio see a server that takes
    /// tasks and never answers.
    pub(super) fn timed_out(
        &self,
        servers: &[usize],
        answered: &[bool],
        predicted: &[bool],
        fanned_at: Nanos,
    ) -> QueryError {
        let pending: Vec<usize> = (0..servers.len()).filter(|&i| !answered[i]).collect();
        self.stats.task_errors.fetch_add(pending.len() as u64, Ordering::Relaxed);
        self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
        if let Some(a) = &self.admission {
            for &i in pending.iter().filter(|&&i| !predicted[i]) {
                a.of(servers[i]).record_task(wall_ns(), true);
            }
        }
        QueryError::Timeout {
            servers: pending.iter().map(|&i| self.cfg.servers[servers[i]]).collect(),
            waited_ms: wall_ns().saturating_sub(fanned_at) as f64 / 1e6,
        }
    }

    /// Tasks sent (or queued here) and not yet returned, over every server.
    pub fn in_flight_tasks(&self) -> u64 {
        self.outstanding
            .iter()
            .map(|o| o.lock().expect("outstanding poisoned").values().map(|&c| u64::from(c)).sum::<u64>())
            .sum()
    }

    /// One task: wait for the central queue (if any), call the server, learn from the result.
    /// `known_missed`: the miss was already counted at dispatch (predicted);
    /// the admission controller is not told about this task again.
    /// `fanned_at`: when the query started dispatching its tasks (wall clock).
    pub(super) async fn run_task(
        self: &Arc<Self>,
        s: usize,
        ctx: Context,
        header: wire::Encoded,
        work_seed: Option<u64>,
        known_missed: bool,
        fanned_at: Nanos,
    ) -> Result<(bool, Nanos, TaskTrace), QueryError> {
        let queued_at = Instant::now();
        let central = self.cfg.queuing == Queuing::Central;
        let mut missed_here = false;
        let mut count_on_result = false;
        let mut job_id = None;
        // Central queuing: undoes the queue entry if this task is dropped (query timeout).
        let mut guard: Option<CentralSlot> = None;
        if central {
            if let Some(a) = self.admission.as_ref().filter(|_| !known_missed) {
                a.of(s).task_queued(wall_ns(), ctx.deadline, 1);
            }
            let (id, rx) = {
                let mut q = self.central[s].lock().expect("central queue poisoned");
                let id = q.next_id;
                q.next_id += 1;
                let (tx, rx) = oneshot::channel();
                q.waiting.insert(id, tx);
                q.policy.arrive(wall_ns(), Job { id, gat: ctx.gat, deadline: ctx.deadline, class: ctx.class });
                self.release_next(&mut q);
                (id, rx)
            };
            job_id = Some(id);
            guard = Some(CentralSlot {
                handler: self.clone(),
                server: s,
                id,
                deadline: ctx.deadline,
                announced: self.admission.is_some() && !known_missed,
                released: false,
            });
            let _ = rx.await;
            let now = wall_ns();
            missed_here = now > ctx.deadline;
            if let Some(g) = guard.as_mut() {
                g.released = true;
                g.announced = false;
            }
            // Released: late if its deadline passed in the queue (counted then). An on-time
            // release is counted once the server answers, as at-server queuing counts results:
            // a task released to a dead server fails at once and met no deadline.
            if let Some(a) = self.admission.as_ref().filter(|_| !known_missed) {
                count_on_result = !a.of(s).task_withdrawn(now, ctx.deadline);
            }
        }
        let sent = Instant::now();
        let sent_at = wall_ns();
        let waited_here = sent.duration_since(queued_at).as_nanos() as Nanos;
        let result = self.call(s, &header, work_seed).await;
        let round_trip = sent.elapsed().as_nanos() as Nanos;
        let received_at = wall_ns();
        if let Some(id) = job_id {
            let mut q = self.central[s].lock().expect("central queue poisoned");
            q.policy.complete(wall_ns(), id);
            q.released = None;
            self.release_next(&mut q);
            if let Some(g) = guard.as_mut() {
                g.id = JobId::MAX;
            }
        }
        let reply = match result {
            Ok(v) => v,
            Err(e) => {
                self.stats.task_errors.fetch_add(1, Ordering::Relaxed);
                return Err(QueryError::Task { server: self.cfg.servers[s], error: e });
            }
        };
        let (queue_ns, missed_at_server) = (reply.queue_ns, reply.missed);
        // §III.B.2: post-dequeue time = result time − dequeue time, the dequeue
        // time coming with the result. On one host (loopback) the wall clocks
        // agree; a dequeue time outside [send, receive] means they do not, and
        // the round trip minus the server's queue time is used instead (which
        // also counts the dispatch, a pre-dequeue time, as post-dequeue).
        // The dispatch overhead counts from the moment the query fanned out
        // (at-server queuing): a fan-out-32 query's last task is sent ~0.5 ms
        // after its first (32 spawns and requests on two cores), which the
        // simulator, which dispatches all k at once, would not otherwise see.
        // Centrally queued, from the release (before it, the task was queued).
        let from = if central { sent_at } else { fanned_at.min(sent_at) };
        let dispatch = reply.arrived_at.checked_sub(from);
        let post_dequeue = match received_at.checked_sub(reply.dequeued_at) {
            Some(p) if reply.dequeued_at >= sent_at && dispatch.is_some() => {
                self.dispatch.lock().expect("dispatch poisoned").record(dispatch.unwrap_or(0));
                p
            }
            _ => round_trip.saturating_sub(queue_ns),
        };
        self.learned[s].lock().expect("histogram poisoned").record(post_dequeue);
        self.overhead.lock().expect("overhead poisoned").record(post_dequeue.saturating_sub(reply.service_ns));
        let missed = if central { missed_here } else { missed_at_server };
        if !central && !known_missed {
            // At-server queuing: the miss is piggybacked on the result (§III.C).
            if let Some(a) = &self.admission {
                a.of(s).record_task(wall_ns(), missed);
            }
        }
        if count_on_result {
            // Central queuing, released on time: the outcome of a task that ran.
            if let Some(a) = &self.admission {
                a.of(s).record_task(received_at, missed_here);
            }
        }
        self.stats.tasks.fetch_add(1, Ordering::Relaxed);
        if missed {
            self.stats.tasks_missed.fetch_add(1, Ordering::Relaxed);
        }
        let trace = TaskTrace {
            server: s,
            sent_at,
            arrived_at: reply.arrived_at,
            dequeued_at: reply.dequeued_at,
            service_ns: reply.service_ns,
            received_at,
        };
        Ok((missed, waited_here + queue_ns, trace))
    }

    /// What a task's queue orders it by, as a key where smaller goes first:
    /// the deadline (TF-EDFQ, T-EDFQ), the class (PRIQ) or nothing (FIFO: every
    /// outstanding task is ahead).
    pub(super) fn queue_key(&self, ctx: &Context) -> Nanos {
        match self.cfg.scheme {
            Scheme::TfEdfq | Scheme::TEdfq => ctx.deadline,
            Scheme::Priq => ctx.class as Nanos,
            Scheme::Fifo => 0,
        }
    }

    /// POST /task; returns what the server reported.
    pub(super) async fn call(
        &self,
        s: usize,
        header: &wire::Encoded,
        work_seed: Option<u64>,
    ) -> Result<TaskReply, TaskError> {
        let addr = self.cfg.servers[s];
        let mut req = http::Request::post(format!("http://{addr}/task")).header(wire::HEADER, header.as_str());
        if let Some(seed) = work_seed {
            req = req.header(WORK_SEED, seed);
        }
        let req = req.body(Empty::<Bytes>::new()).map_err(TaskError::Request)?;
        let (resp, body) = self.client.request(req).await.map_err(TaskError::Send)?.into_parts();
        // Read to its end (bounded): a connection goes back to the pool only once its response
        // is complete, and one whose body is dropped unread is closed, so an error answer (a
        // full queue's 503 has a body) would cost a reconnect.
        let body = Limited::new(body, MAX_TASK_BODY)
            .collect()
            .await
            .map_err(|source| TaskError::Body { status: resp.status, source })?
            .to_bytes();
        if !resp.status.is_success() {
            let body = String::from_utf8_lossy(&body).trim().to_string();
            return Err(TaskError::Status { status: resp.status, body });
        }
        let num = |name: &str| -> Nanos {
            resp.headers.get(name).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok()).unwrap_or(0)
        };
        Ok(TaskReply {
            queue_ns: num(QUEUE_NS),
            missed: num(MISSED) == 1,
            service_ns: num(SERVICE_NS),
            arrived_at: num(ARRIVED_AT),
            dequeued_at: num(DEQUEUED_AT),
        })
    }
}
