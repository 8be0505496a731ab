//! Fail-safe paths with real agent processes: SIGTERM restores, a `kill -9` leaves the journal
//! for `safe-mode` or the supervisor, the supervisor restores and restarts within 5 s, and the
//! safe-mode switch works against a running agent.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use tailor_node::Capabilities;

fn one_tier(sb: &Sandbox) -> (std::path::PathBuf, String) {
    let tier = sb.tier("be");
    let caps = Capabilities::probe();
    let text = format!(
        "[[tier]]\nname = \"{tier}\"\nkind = \"best-effort\"\ncpus = \"{}\"\nidle = true\nsched_idle = true\n",
        caps.online_cpus[0]
    );
    (sb.config(&text).0, tier)
}

fn placed(pid: u32, sb: &Sandbox, tier: &str) -> bool {
    cpu_cgroup_of(pid).is_some_and(|c| c.ends_with(&format!("{}/{tier}", sb.name)))
}

fn agent_pid(sb: &Sandbox) -> Option<u32> {
    std::fs::read_to_string(sb.state_dir().join("agent.pid")).ok()?.trim().parse().ok()
}

fn kill(pid: u32, sig: i32) {
    // SAFETY: a signal to a process this test started (directly or via its supervisor).
    unsafe { libc::kill(pid as i32, sig) };
}

#[test]
fn sigterm_restores_and_kill_9_leaves_a_journal_that_safe_mode_undoes() {
    if !root_or_skip("sigterm_restores_and_kill_9_leaves_a_journal_that_safe_mode_undoes") {
        return;
    }
    let sb = Sandbox::new();
    let (config, tier) = one_tier(&sb);
    let target = sleeper(Some(&tier));
    let run = || Proc(Command::new(BIN).arg("run").arg("--config").arg(&config).stderr(Stdio::null()).spawn().unwrap());

    let agent = run();
    assert!(wait_for(Duration::from_secs(10), || placed(target.pid(), &sb, &tier)).is_some());
    kill(agent.pid(), libc::SIGTERM);
    assert!(wait_for(Duration::from_secs(10), || !placed(target.pid(), &sb, &tier)).is_some());
    assert_eq!(policy_of(target.pid()), libc::SCHED_OTHER);
    drop(agent);

    let agent = run();
    assert!(wait_for(Duration::from_secs(10), || placed(target.pid(), &sb, &tier)).is_some());
    kill(agent.pid(), libc::SIGKILL);
    drop(agent);
    // Nothing restores a SIGKILLed agent by itself: the journal is there for whoever comes next.
    assert!(placed(target.pid(), &sb, &tier));
    assert!(sb.state_dir().join("journal.jsonl").exists());
    let out = Command::new(BIN).arg("safe-mode").arg("--config").arg(&config).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!placed(target.pid(), &sb, &tier));
    assert_eq!(policy_of(target.pid()), libc::SCHED_OTHER);
    for h in Capabilities::probe().hierarchies {
        assert!(!h.root.join(&sb.name).exists());
    }
}

#[test]
fn supervisor_restores_and_restarts_after_kill_9_within_5_s() {
    if !root_or_skip("supervisor_restores_and_restarts_after_kill_9_within_5_s") {
        return;
    }
    let sb = Sandbox::new();
    let (config, tier) = one_tier(&sb);
    let target = sleeper(Some(&tier));
    let mut supervisor =
        Proc(Command::new(BIN).arg("supervise").arg("--config").arg(&config).stderr(Stdio::piped()).spawn().unwrap());
    let (tx, rx) = mpsc::channel();
    let stderr = supervisor.0.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send((Instant::now(), line));
        }
    });
    assert!(wait_for(Duration::from_secs(10), || placed(target.pid(), &sb, &tier)).is_some());
    let first = wait_for(Duration::from_secs(5), || agent_pid(&sb).is_some()).and_then(|_| agent_pid(&sb)).unwrap();

    let killed_at = Instant::now();
    kill(first, libc::SIGKILL);
    // Re-applied: a new agent pid and the target placed again.
    let reapplied = wait_for(Duration::from_secs(10), || {
        agent_pid(&sb).is_some_and(|p| p != first) && placed(target.pid(), &sb, &tier)
    });
    // Restored: the supervisor's log line, timestamped as it arrived.
    let mut restored_after = None;
    while let Ok((at, line)) = rx.recv_timeout(Duration::from_millis(200)) {
        if line.contains("restored") && line.contains(&format!("agent pid {first}")) {
            restored_after = Some(at.duration_since(killed_at));
        }
    }
    let reapplied = reapplied.expect("supervisor did not restart the agent within 10 s");
    let restored_after = restored_after.expect("supervisor did not report a restore");
    println!("kill -9 → restored in {restored_after:?}, re-applied in {reapplied:?}");
    assert!(restored_after < Duration::from_secs(5), "restore took {restored_after:?}");
    assert!(reapplied < Duration::from_secs(5), "re-apply took {reapplied:?}");

    // SIGTERM to the supervisor: the agent restores, nothing is left.
    kill(supervisor.pid(), libc::SIGTERM);
    assert!(wait_for(Duration::from_secs(10), || matches!(supervisor.0.try_wait(), Ok(Some(_)))).is_some());
    assert!(!placed(target.pid(), &sb, &tier));
    for h in Capabilities::probe().hierarchies {
        assert!(!h.root.join(&sb.name).exists());
    }
}

#[test]
fn safe_mode_switch_against_a_running_agent() {
    if !root_or_skip("safe_mode_switch_against_a_running_agent") {
        return;
    }
    let sb = Sandbox::new();
    let (config, tier) = one_tier(&sb);
    let target = sleeper(Some(&tier));
    let agent = Proc(Command::new(BIN).arg("run").arg("--config").arg(&config).stderr(Stdio::null()).spawn().unwrap());
    assert!(wait_for(Duration::from_secs(10), || placed(target.pid(), &sb, &tier)).is_some());
    let out = Command::new(BIN).arg("safe-mode").arg("--config").arg(&config).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("agent pid {}", agent.pid())));
    assert!(!placed(target.pid(), &sb, &tier));
    assert_eq!(policy_of(target.pid()), libc::SCHED_OTHER);
    // It stays stock while the flag is set...
    std::thread::sleep(Duration::from_millis(400));
    assert!(!placed(target.pid(), &sb, &tier));
    // ...and enforces again when cleared.
    let out = Command::new(BIN).arg("safe-mode").arg("--config").arg(&config).arg("--off").output().unwrap();
    assert!(out.status.success());
    assert!(wait_for(Duration::from_secs(10), || placed(target.pid(), &sb, &tier)).is_some());
    kill(agent.pid(), libc::SIGTERM);
    assert!(wait_for(Duration::from_secs(10), || !placed(target.pid(), &sb, &tier)).is_some());
}
