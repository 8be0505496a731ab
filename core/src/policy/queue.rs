//! PLACEHOLDER (being written): non-preemptive queue disciplines.
use super::{Job, JobId, Policy};
use crate::time::Nanos;
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discipline { Fifo, Gfifo, Edf, Priq, Lifo, Random { seed: u64 } }
pub struct NonPreemptive { running: Vec<Option<JobId>> }
impl NonPreemptive { pub fn new(cpus: usize, _d: Discipline) -> Self { NonPreemptive { running: vec![None; cpus] } } }
impl Policy for NonPreemptive {
    fn name(&self) -> &'static str { "fifo" }
    fn arrive(&mut self, _now: Nanos, _job: Job) { todo!() }
    fn block(&mut self, _now: Nanos, _id: JobId) { todo!() }
    fn wake(&mut self, _now: Nanos, _job: Job) { todo!() }
    fn complete(&mut self, _now: Nanos, _id: JobId) { todo!() }
    fn tick(&mut self, _now: Nanos) { todo!() }
    fn running(&self) -> &[Option<JobId>] { &self.running }
    fn next_tick(&self) -> Option<Nanos> { None }
    fn waiting(&self) -> usize { 0 }
}
