//! PLACEHOLDER (being written): Oldest Request First.
use super::{Job, JobId, Policy};
use crate::time::Nanos;
pub struct Orf { running: Vec<Option<JobId>> }
impl Orf { pub fn new(cpus: usize, _c: usize, _slice: Nanos) -> Self { Orf { running: vec![None; cpus] } } }
impl Policy for Orf {
    fn name(&self) -> &'static str { "orf" }
    fn arrive(&mut self, _now: Nanos, _job: Job) { todo!() }
    fn block(&mut self, _now: Nanos, _id: JobId) { todo!() }
    fn wake(&mut self, _now: Nanos, _job: Job) { todo!() }
    fn complete(&mut self, _now: Nanos, _id: JobId) { todo!() }
    fn tick(&mut self, _now: Nanos) { todo!() }
    fn running(&self) -> &[Option<JobId>] { &self.running }
    fn next_tick(&self) -> Option<Nanos> { None }
    fn waiting(&self) -> usize { 0 }
}
