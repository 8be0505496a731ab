//! `[gat_domain]`: the node agent hosts the runtime's node-wide kernel-enforced
//! scheduler. A service that registers a job in the agent's table is scheduled by it,
//! and when the agent stops (SIGTERM) the scheduler stops with it.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use tailor_core::Context;
use tailor_runtime::{BackendSpec, Scheduler, SchedulerOptions};

#[test]
fn the_node_agent_hosts_the_gat_domain_scheduler() {
    if !root_or_skip("the_node_agent_hosts_the_gat_domain_scheduler") {
        return;
    }
    let sb = Sandbox::new();
    let tier = sb.tier("lc");
    let table = std::path::PathBuf::from(format!("/dev/shm/{}-sched", sb.name));
    let (config, _) = sb.config(&format!(
        "[[tier]]\nname = \"{tier}\"\nkind = \"critical\"\nrt_runtime_us = 20000\n\n[gat_domain]\ntier = \"{tier}\"\ntable = {:?}\ncpus = 1\n",
        table.display().to_string()
    ));
    let agent = Proc(Command::new(BIN).arg("run").arg("--config").arg(&config).stderr(Stdio::null()).spawn().unwrap());
    assert!(
        wait_for(Duration::from_secs(10), || table.exists()).is_some(),
        "the node agent did not create the GAT-domain table {}",
        table.display()
    );

    // A service of the domain: its job is admitted and completed by the hosted scheduler.
    let sched = Scheduler::with_options(
        BackendSpec::kernel(&table),
        SchedulerOptions { log: false, ..SchedulerOptions::default() },
    )
    .expect("register with the node agent's scheduler");
    // SAFETY: sched_getscheduler(0) reads this thread's policy.
    let before = unsafe { libc::sched_getscheduler(0) };
    for i in 0..20u64 {
        let ctx = Context::stamped(1_000 + i);
        sched.run(&ctx, |_| tailor_runtime::cpu::burn_cpu(200_000));
    }
    let stats = sched.stats();
    assert_eq!((stats.admitted, stats.completed), (20, 20), "{stats:?}");
    assert_eq!(stats.fallbacks, 0, "the hosted scheduler was not seen as alive: {stats:?}");
    assert_eq!(stats.errors, 0, "{stats:?}");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::sched_getscheduler(0) }, before, "the job thread kept a scheduler-set policy");
    drop(sched);

    // SAFETY: SIGTERM to the agent process this test started.
    unsafe { libc::kill(agent.pid() as i32, libc::SIGTERM) };
    let mut child = agent;
    let stopped = wait_for(Duration::from_secs(10), || child.0.try_wait().ok().flatten().is_some());
    assert!(stopped.is_some(), "the node agent did not stop on SIGTERM");
    let _ = std::fs::remove_file(&table);
}
