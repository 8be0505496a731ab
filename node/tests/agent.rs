//! The agent's mechanisms on the real kernel: cpuset, cpu.idle, SCHED_IDLE, weights, the RT
//! band, reconcile after someone rewrites a setting, PSI attribution, and restore.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use tailor_node::attribution::Window;
use tailor_node::probe::Role;
use tailor_node::{Agent, Capabilities};

fn tiers(sb: &Sandbox, critical_pid: u32, caps: &Capabilities) -> String {
    let last = caps.online_cpus.last().copied().unwrap_or(0);
    let first = caps.online_cpus[0];
    format!(
        "[[tier]]\nname = \"{}\"\nkind = \"critical\"\ndemand_cpus = 0.5\ncpus = \"{last}\"\ncpu_weight = 10000\nrt_runtime_us = 10000\n\
         [tier.match]\npid = [{critical_pid}]\n\
         [[tier]]\nname = \"{}\"\nkind = \"best-effort\"\ncpus = \"{first}\"\nidle = true\nsched_idle = true\n",
        sb.tier("crit"),
        sb.tier("be"),
    )
}

#[test]
fn tiers_apply_every_mechanism_and_restore_removes_everything() {
    if !root_or_skip("tiers_apply_every_mechanism_and_restore_removes_everything") {
        return;
    }
    let caps = Capabilities::probe();
    let sb = Sandbox::new();
    let critical = sleeper(None);
    let best_effort = sleeper(Some(&sb.tier("be")));
    let original_cpu_cgroup = cpu_cgroup_of(best_effort.pid()).unwrap();
    let (_, config) = sb.config(&tiers(&sb, critical.pid(), &caps));
    let mut agent = Agent::new(config, caps.clone()).unwrap();
    agent.start_enforcing().unwrap();

    let last = caps.online_cpus.last().unwrap().to_string();
    let first = caps.online_cpus[0].to_string();
    // Matched by PID and by label, placed in their tier cgroups.
    assert!(cpu_cgroup_of(critical.pid()).unwrap().ends_with(&format!("/{}/{}", sb.name, sb.tier("crit"))));
    assert!(cpu_cgroup_of(best_effort.pid()).unwrap().ends_with(&format!("/{}/{}", sb.name, sb.tier("be"))));
    // cpuset fence: the kernel's own view of where each may run.
    if caps.cpuset && caps.online_cpus.len() > 1 {
        assert_eq!(cpus_allowed(critical.pid()), last);
        assert_eq!(cpus_allowed(best_effort.pid()), first);
    }
    // cpu.idle and weights, read back from the files.
    for h in &caps.hierarchies {
        let crit = sb.cgroup(&h.root, &sb.tier("crit"));
        let be = sb.cgroup(&h.root, &sb.tier("be"));
        match h.role {
            Role::V1Cpu => {
                assert_eq!(std::fs::read_to_string(crit.join("cpu.shares")).unwrap().trim(), "102400");
                if caps.cpu_idle {
                    assert_eq!(std::fs::read_to_string(be.join("cpu.idle")).unwrap().trim(), "1");
                }
            }
            Role::Unified => {
                assert_eq!(std::fs::read_to_string(crit.join("cpu.weight")).unwrap().trim(), "10000");
                assert_eq!(std::fs::read_to_string(be.join("cpu.idle")).unwrap().trim(), "1");
            }
            _ => assert!(crit.exists() && be.exists()),
        }
    }
    // SCHED_IDLE on the best-effort process, untouched critical.
    assert_eq!(policy_of(best_effort.pid()), libc::SCHED_IDLE);
    assert_eq!(policy_of(critical.pid()), libc::SCHED_OTHER);
    assert!(agent.readback().iter().all(|r| r.matches), "{:?}", agent.readback());

    // Attribution: an enforced window is tagged protected and carries per-tier PSI.
    let window = Window::start(&agent);
    std::thread::sleep(Duration::from_millis(50));
    let record = window.finish(&agent);
    assert!(record.protected, "{}", record.reason);
    if caps.psi_per_cgroup {
        assert!(record.tiers.iter().all(|t| t.psi_some_delta_us.is_some()), "{:?}", record.tiers);
    }

    let report = agent.safe_mode().unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(cpu_cgroup_of(best_effort.pid()).unwrap(), original_cpu_cgroup);
    assert_eq!(policy_of(best_effort.pid()), libc::SCHED_OTHER);
    for h in &caps.hierarchies {
        assert!(!h.root.join(&sb.name).exists(), "{} left behind", h.root.join(&sb.name).display());
    }
    // A safe-mode window is tagged not protected.
    let record = Window::start(&agent).finish(&agent);
    assert!(!record.protected);
}

#[test]
fn reconcile_repairs_settings_placements_and_policies_someone_rewrote() {
    if !root_or_skip("reconcile_repairs_settings_placements_and_policies_someone_rewrote") {
        return;
    }
    let caps = Capabilities::probe();
    let Some(cpu) = caps.hierarchy(Role::V1Cpu).or(caps.hierarchy(Role::Unified)).cloned() else {
        eprintln!("SKIP: no cpu controller");
        return;
    };
    let sb = Sandbox::new();
    let critical = sleeper(None);
    let best_effort = sleeper(Some(&sb.tier("be")));
    let (_, config) = sb.config(&tiers(&sb, critical.pid(), &caps));
    let mut agent = Agent::new(config, caps.clone()).unwrap();
    agent.start_enforcing().unwrap();
    let be_dir = sb.cgroup(&cpu.root, &sb.tier("be"));
    if caps.cpu_idle {
        std::fs::write(be_dir.join("cpu.idle"), "0").unwrap();
    }
    std::fs::write(cpu.root.join("cgroup.procs"), best_effort.pid().to_string()).unwrap();
    // SAFETY: plain syscall on our own child.
    unsafe {
        let p = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(best_effort.pid() as i32, libc::SCHED_OTHER, &p);
    }
    assert!(!agent.readback().iter().all(|r| r.matches) || !caps.cpu_idle);
    agent.reconcile().unwrap();
    if caps.cpu_idle {
        assert_eq!(std::fs::read_to_string(be_dir.join("cpu.idle")).unwrap().trim(), "1");
        assert!(agent.stats.settings_repaired >= 1);
    }
    assert!(cpu_cgroup_of(best_effort.pid()).unwrap().ends_with(&sb.tier("be")));
    assert_eq!(policy_of(best_effort.pid()), libc::SCHED_IDLE);
    assert!(agent.stats.placements_repaired >= 1, "{:?}", agent.stats);
    assert!(agent.stats.policies_repaired >= 1, "{:?}", agent.stats);
    // A rewrite during a window un-protects it.
    let window = Window::start(&agent);
    std::fs::write(cpu.root.join("cgroup.procs"), best_effort.pid().to_string()).unwrap();
    agent.reconcile().unwrap();
    assert!(!window.finish(&agent).protected);

    // A process that leaves is counted.
    drop(best_effort);
    agent.reconcile().unwrap();
    assert_eq!(agent.stats.departed, 1);
    agent.safe_mode().unwrap();
    for h in &caps.hierarchies {
        assert!(!h.root.join(&sb.name).exists());
    }
}

#[test]
fn a_finished_child_not_yet_reaped_is_not_a_repair() {
    if !root_or_skip("a_finished_child_not_yet_reaped_is_not_a_repair") {
        return;
    }
    // The ladder's load client prints its result and exits; until the ladder reaps it, it is a
    // zombie that v1 shows in the root cgroup of every hierarchy. The agent used to "repair" it
    // (a no-op write that succeeds) and so tag the window unprotected (a CI failure, 25 Nov).
    let caps = Capabilities::probe();
    let sb = Sandbox::new();
    let critical = sleeper(None);
    let label = sb.tier("be");
    let mut child = start_at_stock_policy(&mut Command::new("sh"))
        .args(["-c", "read line"])
        .env("TAILOR_TIER", &label)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    exec_done(pid, "sh", Some(&label));
    let (_, config) = sb.config(&tiers(&sb, critical.pid(), &caps));
    let mut agent = Agent::new(config, caps.clone()).unwrap();
    agent.start_enforcing().unwrap();
    assert!(cpu_cgroup_of(pid).unwrap().ends_with(&label));
    let window = Window::start(&agent);
    drop(child.stdin.take());
    let zombie = || tailor_node::procs::proc_info(pid).is_some_and(|p| p.exiting);
    assert!(wait_for(Duration::from_secs(5), zombie).is_some(), "pid {pid} did not exit");
    agent.reconcile().unwrap();
    let record = window.finish(&agent);
    assert_eq!(agent.stats.placements_repaired + agent.stats.policies_repaired, 0, "{:?}", agent.stats);
    assert_eq!(agent.stats.errors, 0, "{:?}", agent.stats);
    assert!(record.protected, "{}", record.reason);
    child.wait().unwrap();
    agent.reconcile().unwrap();
    agent.safe_mode().unwrap();
}

#[test]
fn new_threads_and_forked_children_are_covered_and_reset_at_restore() {
    if !root_or_skip("new_threads_and_forked_children_are_covered_and_reset_at_restore") {
        return;
    }
    let caps = Capabilities::probe();
    let sb = Sandbox::new();
    let (_, config) = sb.config(&tiers(&sb, 0, &caps));
    let mut agent = Agent::new(config, caps.clone()).unwrap();
    agent.start_enforcing().unwrap();
    // A process labeled best-effort whose three worker threads start only after it was
    // placed (when told to on stdin): the agent must cover threads that appear later.
    const LATE_THREADS: &str = "import sys, threading, time\n\
print('ready', flush=True)\n\
sys.stdin.readline()\n\
for _ in range(3): threading.Thread(target=time.sleep, args=(1000,), daemon=True).start()\n\
sys.stdin.readline()\n";
    let mut server = Proc(
        start_at_stock_policy(&mut Command::new("python3"))
            .args(["-c", LATE_THREADS])
            .env("TAILOR_TIER", sb.tier("be"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(server.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    agent.reconcile().unwrap();
    writeln!(server.0.stdin.as_mut().unwrap(), "go").unwrap();
    let pid = server.pid();
    let tids = || tailor_node::procs::tids(pid);
    assert!(wait_for(Duration::from_secs(5), || tids().len() >= 4).is_some(), "workers did not start");
    // Someone resets one worker to SCHED_OTHER: the next pass fixes every thread.
    let victim = *tids().last().unwrap();
    // SAFETY: plain syscall on a thread of our own child.
    unsafe {
        let p = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(victim as i32, libc::SCHED_OTHER, &p);
    }
    agent.reconcile().unwrap();
    for tid in tids() {
        assert_eq!(policy_of(tid), libc::SCHED_IDLE, "tid {tid}");
    }
    // A child forked inside the tier, unlabeled (so never matched itself), inherits the cgroup
    // and SCHED_IDLE; restore must move it out and reset it too.
    let mut shell = Proc(
        start_at_stock_policy(&mut Command::new("sh"))
            .arg("-c")
            .arg("read x; env -u TAILOR_TIER sleep 1000 & wait")
            .env("TAILOR_TIER", sb.tier("be"))
            .stdin(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    exec_done(shell.pid(), "sh", Some(&sb.tier("be")));
    agent.reconcile().unwrap();
    assert_eq!(policy_of(shell.pid()), libc::SCHED_IDLE);
    writeln!(shell.0.stdin.as_mut().unwrap(), "go").unwrap();
    let children = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|c| c.parse::<u32>().ok())
            .collect::<Vec<_>>()
    };
    assert!(wait_for(Duration::from_secs(5), || !children(shell.pid()).is_empty()).is_some());
    let child = children(shell.pid())[0];
    assert!(wait_for(Duration::from_secs(5), || tailor_node::procs::proc_info(child)
        .is_some_and(|p| p.comm == "sleep"))
    .is_some());
    assert_eq!(policy_of(child), libc::SCHED_IDLE);
    agent.safe_mode().unwrap();
    for tid in tids() {
        assert_eq!(policy_of(tid), libc::SCHED_OTHER, "tid {tid} kept SCHED_IDLE");
    }
    assert_eq!(policy_of(child), libc::SCHED_OTHER, "forked child kept SCHED_IDLE");
    assert!(!cpu_cgroup_of(child).unwrap().contains(&sb.name));
    // SAFETY: the sleep is our shell's child; killed by pid.
    unsafe { libc::kill(child as i32, libc::SIGKILL) };
}

#[test]
fn rt_band_needs_a_budget_and_is_undone() {
    if !root_or_skip("rt_band_needs_a_budget_and_is_undone") {
        return;
    }
    let caps = Capabilities::probe();
    let sb = Sandbox::new();
    let p = sleeper(Some(&sb.tier("crit")));
    let text = format!(
        "[[tier]]\nname = \"{}\"\nkind = \"critical\"\ndemand_cpus = 0.5\nrt_priority = 1\nrt_runtime_us = 20000\n",
        sb.tier("crit")
    );
    let (_, config) = sb.config(&text);
    let mut agent = Agent::new(config, caps.clone()).unwrap();
    agent.start_enforcing().unwrap();
    assert_eq!(policy_of(p.pid()), libc::SCHED_RR);
    if let Some(h) = caps.hierarchy(Role::V1Cpu) {
        let dir = sb.cgroup(&h.root, &sb.tier("crit"));
        assert_eq!(std::fs::read_to_string(dir.join("cpu.rt_runtime_us")).unwrap().trim(), "20000");
    }
    agent.safe_mode().unwrap();
    assert_eq!(policy_of(p.pid()), libc::SCHED_OTHER);
    // Without a budget on an RT-group kernel the config is refused with the fix named.
    if caps.rt_group {
        let bad = "[[tier]]\nname = \"x\"\nkind = \"critical\"\nrt_priority = 1\nrt_runtime_us = 0\n";
        let err = tailor_node::NodeConfig::parse(bad, "bad.toml").unwrap_err().to_string();
        assert!(err.contains("rt_runtime_us"), "{err}");
    }
}

#[test]
fn kernel_threads_are_never_touched() {
    if !root_or_skip("kernel_threads_are_never_touched") {
        return;
    }
    let caps = Capabilities::probe();
    let sb = Sandbox::new();
    // Match kthreadd's children by name: the per-CPU ones (ksoftirqd/N, migration/N) must stay.
    let text = format!(
        "[[tier]]\nname = \"{}\"\nkind = \"best-effort\"\ncpus = \"{}\"\n[tier.match]\ncomm = [\"ksoftirqd/0\", \"kthreadd\"]\npid = [2]\n",
        sb.tier("be"),
        caps.online_cpus[0]
    );
    let (_, config) = sb.config(&text);
    let mut agent = Agent::new(config, caps).unwrap();
    agent.start_enforcing().unwrap();
    assert_eq!(agent.stats.members.iter().sum::<usize>(), 0);
    assert_eq!(agent.stats.processes_placed, 0);
    agent.safe_mode().unwrap();
}

#[test]
fn bad_config_is_rejected_with_file_line_and_valid_keys() {
    let sb = Sandbox::new();
    let path = sb.dir.join("bad.toml");
    std::fs::write(&path, "[[tier]]\nname = \"a\"\nkind = \"critical\"\ncpu_wieght = 5\n").unwrap();
    let out = Command::new(BIN).arg("run").arg("--config").arg(&path).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(err.contains(&format!("{}:4", path.display())), "{err}");
    assert!(err.contains("cpu_weight"), "{err}");
}
