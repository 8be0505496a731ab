//! PLACEHOLDER (being written): round robin.
use super::{Job, JobId, Policy};
use crate::time::Nanos;
pub struct RoundRobin { running: Vec<Option<JobId>> }
impl RoundRobin { pub fn new(cpus: usize, _slice: Nanos) -> Self { RoundRobin { running: vec![None; cpus] } } }
impl Policy for RoundRobin {
    fn name(&self) -> &'static str { "rr" }
    fn arrive(&mut self, _now: Nanos, _job: Job) { todo!() }
    fn block(&mut self, _now: Nanos, _id: JobId) { todo!() }
    fn wake(&mut self, _now: Nanos, _job: Job) { todo!() }
    fn complete(&mut self, _now: Nanos, _id: JobId) { todo!() }
    fn tick(&mut self, _now: Nanos) { todo!() }
    fn running(&self) -> &[Option<JobId>] { &self.running }
    fn next_tick(&self) -> Option<Nanos> { None }
    fn waiting(&self) -> usize { 0 }
}
impl RoundRobin { pub fn named(self, _name: &'static str) -> Self { self } }
