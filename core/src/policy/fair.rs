//! PLACEHOLDER (being written): fair.
use super::{Job, JobId, Policy};
use crate::time::Nanos;
pub struct Fair { running: Vec<Option<JobId>> }
impl Fair { pub fn new(cpus: usize, _min_granularity: Nanos, _latency: Nanos) -> Self { Fair { running: vec![None; cpus] } } }
impl Policy for Fair {
    fn name(&self) -> &'static str { "fair" }
    fn arrive(&mut self, _now: Nanos, _job: Job) { todo!() }
    fn block(&mut self, _now: Nanos, _id: JobId) { todo!() }
    fn wake(&mut self, _now: Nanos, _job: Job) { todo!() }
    fn complete(&mut self, _now: Nanos, _id: JobId) { todo!() }
    fn tick(&mut self, _now: Nanos) { todo!() }
    fn running(&self) -> &[Option<JobId>] { &self.running }
    fn next_tick(&self) -> Option<Nanos> { None }
    fn waiting(&self) -> usize { 0 }
}
