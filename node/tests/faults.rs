//! Faults injected into real node-agent processes, with the node read back afterwards: `kill -9`
//! in the middle of a reconcile (bare and supervised), a corrupt or truncated journal, a full or
//! read-only state directory, a cgroup the agent made removed by someone else, and a SIGHUP
//! reload of a config with errors. For each: time to detect, time to restore, what was left
//! changed (must be nothing) and processes lost (must be none), printed as one `FAULT` line
//! (docs/failure-modes.md, "Node agent").

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use tailor_node::Capabilities;

const TARGETS: usize = 12;

/// Everything about the targets and the node the agent may change, as (what → value).
fn snapshot(pids: &[u32], sb: &Sandbox) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for &pid in pids {
        out.insert(
            format!("pid {pid} cgroups"),
            std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default(),
        );
        out.insert(format!("pid {pid} cpus"), cpus_allowed(pid));
        for tid in tailor_node::procs::tids(pid) {
            let s = tailor_node::procs::sched_state(tid);
            out.insert(format!("tid {tid} policy"), format!("{s:?}"));
        }
    }
    for h in Capabilities::probe().hierarchies {
        let dir = h.root.join(&sb.name);
        out.insert(format!("{} exists", dir.display()), dir.exists().to_string());
    }
    out
}

/// What differs between two snapshots, one line each.
fn changed(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: {v:?} → {:?}", after.get(k)))
        .collect()
}

fn lost(pids: &[u32]) -> usize {
    pids.iter().filter(|&&p| tailor_node::procs::proc_info(p).is_none_or(|i| i.exiting)).count()
}

/// Two tiers over every mechanism the agent has on this kernel: the critical one a cpuset, a
/// weight and an RT budget; the best-effort one a cpuset, cpu.idle and SCHED_IDLE. Targets are
/// labeled, half each.
fn tiers(sb: &Sandbox, crit_weight: u64) -> String {
    let caps = Capabilities::probe();
    let last = caps.online_cpus.last().copied().unwrap_or(0);
    let first = caps.online_cpus[0];
    format!(
        "[[tier]]\nname = \"{}\"\nkind = \"critical\"\ndemand_cpus = 0.5\ncpus = \"{last}\"\ncpu_weight = {crit_weight}\nrt_runtime_us = 10000\n\
         [[tier]]\nname = \"{}\"\nkind = \"best-effort\"\ncpus = \"{first}\"\nidle = true\nsched_idle = true\n",
        sb.tier("crit"),
        sb.tier("be"),
    )
}

struct Node {
    sb: Sandbox,
    config: PathBuf,
    targets: Vec<Proc>,
}

impl Node {
    fn new() -> Node {
        let sb = Sandbox::new();
        let text = tiers(&sb, 10_000);
        let (config, _) = sb.config(&text);
        let targets = (0..TARGETS).map(|i| sleeper(Some(&sb.tier(if i % 2 == 0 { "crit" } else { "be" })))).collect();
        Node { sb, config, targets }
    }

    fn pids(&self) -> Vec<u32> {
        self.targets.iter().map(Proc::pid).collect()
    }

    fn placed(&self) -> usize {
        let sb = &self.sb;
        self.pids()
            .into_iter()
            .filter(|&p| cpu_cgroup_of(p).is_some_and(|c| c.contains(&format!("/{}/", sb.name))))
            .count()
    }

    fn journal(&self) -> PathBuf {
        self.sb.state_dir().join("journal.jsonl")
    }

    fn journal_lines(&self) -> usize {
        std::fs::read(self.journal()).map(|b| b.iter().filter(|&&c| c == b'\n').count()).unwrap_or(0)
    }

    fn agent(&self, sub: &str) -> (Proc, mpsc::Receiver<(Instant, String)>) {
        let mut p = Proc(
            start_at_stock_policy(&mut Command::new(BIN))
                .arg(sub)
                .arg("--config")
                .arg(&self.config)
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let rx = lines(p.0.stderr.take().unwrap());
        (p, rx)
    }

    fn safe_mode(&self) -> (bool, String, Duration) {
        let t = Instant::now();
        let out = Command::new(BIN).arg("safe-mode").arg("--config").arg(&self.config).output().unwrap();
        let took = t.elapsed();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        // The flag would keep the next agent in stock mode.
        let off = Command::new(BIN).arg("safe-mode").arg("--config").arg(&self.config).arg("--off").output().unwrap();
        assert!(off.status.success());
        (out.status.success(), text, took)
    }
}

/// Every line of a child's stderr, timestamped as it arrives.
fn lines(stderr: std::process::ChildStderr) -> mpsc::Receiver<(Instant, String)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    rx
}

/// The first line satisfying `f` within `timeout`, with its arrival time.
fn wait_line(
    rx: &mpsc::Receiver<(Instant, String)>,
    timeout: Duration,
    f: impl Fn(&str) -> bool,
) -> Option<(Instant, String)> {
    let end = Instant::now() + timeout;
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok((at, line)) if f(&line) => return Some((at, line)),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

fn kill(pid: u32, sig: i32) {
    // SAFETY: a signal to a process this test started (directly or through its supervisor).
    unsafe { libc::kill(pid as i32, sig) };
}

fn report(fault: &str, detect: Option<Duration>, restore: Duration, left: &[String], lost: usize) {
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
    println!(
        "FAULT {fault}: detect {}, restore {}, left changed {}, processes lost {lost}",
        detect.map_or("n/a".into(), ms),
        ms(restore),
        left.len()
    );
}

#[test]
fn kill_9_mid_reconcile_then_safe_mode_restores_every_setting() {
    if !root_or_skip("kill_9_mid_reconcile_then_safe_mode_restores_every_setting") {
        return;
    }
    let node = Node::new();
    let before = snapshot(&node.pids(), &node.sb);
    // Killed at different points of the first pass: after 1, 4, 10, 20… journal entries.
    for at_lines in [1usize, 4, 10, 20, 35] {
        let (agent, _log) = node.agent("run");
        let reached =
            wait_for(Duration::from_secs(10), || node.journal_lines() >= at_lines || node.placed() == TARGETS);
        kill(agent.pid(), libc::SIGKILL);
        drop(agent);
        assert!(reached.is_some(), "the agent never journaled {at_lines} entries");
        let journaled = node.journal_lines();
        let (ok, text, took) = node.safe_mode();
        assert!(ok, "safe-mode after kill -9 at {journaled} entries: {text}");
        let left = changed(&before, &snapshot(&node.pids(), &node.sb));
        report(
            &format!("node agent kill -9 mid-reconcile ({journaled} entries journaled), safe-mode"),
            None,
            took,
            &left,
            lost(&node.pids()),
        );
        assert!(left.is_empty(), "left changed after kill -9 at {journaled} entries: {left:#?}");
        assert_eq!(lost(&node.pids()), 0);
    }
}

#[test]
fn supervised_agent_killed_mid_reconcile_is_restored_and_restarted() {
    if !root_or_skip("supervised_agent_killed_mid_reconcile_is_restored_and_restarted") {
        return;
    }
    let node = Node::new();
    let before = snapshot(&node.pids(), &node.sb);
    let (supervisor, log) = node.agent("supervise");
    let agent_pid =
        || -> Option<u32> { std::fs::read_to_string(node.sb.state_dir().join("agent.pid")).ok()?.trim().parse().ok() };
    // Mid-reconcile: the first pass has journaled a few entries and not placed everyone.
    assert!(wait_for(Duration::from_secs(10), || node.journal_lines() >= 3 && agent_pid().is_some()).is_some());
    let first = agent_pid().unwrap();
    let killed = Instant::now();
    kill(first, libc::SIGKILL);
    let detected = wait_line(&log, Duration::from_secs(10), |l| {
        l.contains(&format!("agent pid {first}")) && l.contains("restoring")
    })
    .expect("the supervisor reports the failure");
    let restored = wait_line(&log, Duration::from_secs(10), |l| {
        l.contains(&format!("agent pid {first}")) && l.contains("restored")
    })
    .expect("the supervisor restores");
    wait_for(Duration::from_secs(10), || agent_pid().is_some_and(|p| p != first) && node.placed() == TARGETS)
        .expect("the supervisor restarts the agent and it places every target again");
    println!("  re-applied {:.0} ms after the kill", killed.elapsed().as_secs_f64() * 1e3);
    kill(supervisor.pid(), libc::SIGTERM);
    let mut supervisor = supervisor;
    assert!(wait_for(Duration::from_secs(10), || matches!(supervisor.0.try_wait(), Ok(Some(_)))).is_some());
    let left = changed(&before, &snapshot(&node.pids(), &node.sb));
    let detect = detected.0.duration_since(killed);
    let restore = restored.0.duration_since(killed);
    report("node agent kill -9 mid-reconcile, supervised", Some(detect), restore, &left, lost(&node.pids()));
    assert!(left.is_empty(), "{left:#?}");
    assert_eq!(lost(&node.pids()), 0);
    assert!(restore < Duration::from_secs(5), "restore took {restore:?}");
}

#[test]
fn a_corrupt_journal_is_not_applied_blindly_and_a_truncated_one_is_swept() {
    if !root_or_skip("a_corrupt_journal_is_not_applied_blindly_and_a_truncated_one_is_swept") {
        return;
    }
    let node = Node::new();
    let before = snapshot(&node.pids(), &node.sb);
    let enforce_then_kill = || {
        let (agent, _log) = node.agent("run");
        assert!(wait_for(Duration::from_secs(10), || node.placed() == TARGETS).is_some(), "agent did not place");
        kill(agent.pid(), libc::SIGKILL);
        drop(agent);
    };

    // A damaged entry in the middle (one digit of a pid changed: still valid JSON).
    enforce_then_kill();
    let text = std::fs::read_to_string(node.journal()).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let victim = lines.iter().position(|l| l.contains("\"moved_process\"")).expect("a moved_process entry");
    lines[victim] = lines[victim].replacen("\"pid\":", "\"pid\":9", 1);
    std::fs::write(node.journal(), lines.join("\n") + "\n").unwrap();
    let (ok, out, took) = node.safe_mode();
    assert!(!ok, "a corrupt journal is an error: {out}");
    assert!(out.contains(&format!("journal.jsonl:{}", victim + 1)), "names the file and line: {out}");
    assert!(out.contains("check value does not match"), "{out}");
    assert!(out.contains("journal.jsonl.corrupt") && out.contains("delete"), "names the fix: {out}");
    let corrupt = node.sb.state_dir().join("journal.jsonl.corrupt");
    assert!(corrupt.exists());
    let left = changed(&before, &snapshot(&node.pids(), &node.sb));
    report("node journal with a damaged entry, safe-mode", None, took, &left, lost(&node.pids()));
    assert!(left.is_empty(), "what could be restored was: {left:#?}");
    // While the damaged journal is kept aside, an agent does not enforce: it says why.
    let (agent, log) = node.agent("run");
    let refused =
        wait_line(&log, Duration::from_secs(10), |l| l.contains("journal.jsonl.corrupt") && l.contains("delete"));
    assert!(refused.is_some(), "the agent names the kept journal and the fix");
    assert_eq!(node.placed(), 0, "no enforcement over an unchecked node");
    kill(agent.pid(), libc::SIGTERM);
    drop(agent);
    std::fs::remove_file(&corrupt).unwrap();

    // Truncated in the middle of its second line (the first directory survives, the rest is
    // lost): the torn tail is ignored, what the lost entries changed is swept.
    enforce_then_kill();
    let bytes = std::fs::read(node.journal()).unwrap();
    let first_end = bytes.iter().position(|&b| b == b'\n').unwrap();
    std::fs::write(node.journal(), &bytes[..first_end + 20]).unwrap();
    let (ok, out, took) = node.safe_mode();
    assert!(ok, "{out}");
    assert!(out.contains("swept"), "the lost entries' changes were swept: {out}");
    let left = changed(&before, &snapshot(&node.pids(), &node.sb));
    report("node journal truncated inside its second line, safe-mode", None, took, &left, lost(&node.pids()));
    assert!(left.is_empty(), "{left:#?}");
    assert_eq!(lost(&node.pids()), 0);
}

/// A tmpfs of `size` on `dir` (read-only with `ro`), unmounted when dropped.
struct Mount(PathBuf);

impl Mount {
    fn tmpfs(dir: &Path, size: &str, ro: bool) -> Option<Mount> {
        std::fs::create_dir_all(dir).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}{}", if ro { ",ro" } else { "" }), "tailor-test"])
            .arg(dir)
            .status()
            .ok()?;
        status.success().then(|| Mount(dir.to_path_buf()))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_or_read_only_state_dir_stops_every_change_it_cannot_journal() {
    if !root_or_skip("a_full_or_read_only_state_dir_stops_every_change_it_cannot_journal") {
        return;
    }
    let node = Node::new();
    let before = snapshot(&node.pids(), &node.sb);
    // Full: 8 KiB holds the pid file and a page of journal, far less than the first pass needs.
    let Some(mount) = Mount::tmpfs(&node.sb.state_dir(), "8k", false) else {
        eprintln!("SKIP a_full_or_read_only_state_dir_stops_every_change_it_cannot_journal: cannot mount a tmpfs");
        return;
    };
    let (agent, log) = node.agent("run");
    let started = Instant::now();
    let full = wait_line(&log, Duration::from_secs(10), |l| l.contains("journal.jsonl") && l.contains("No space left"))
        .expect("the agent reports the full state dir, naming the journal");
    assert!(full.1.contains("nothing more is changed"), "{}", full.1);
    // Read the node against the journal: every change made is journaled. The agent tries
    // again on each pass, so a read can land inside an append that is about to fail and be cut
    // back: what must not happen is a partial line that stays.
    let whole = |j: &String| j.is_empty() || j.ends_with('\n');
    let mut journal = std::fs::read_to_string(node.journal()).unwrap();
    for _ in 0..40 {
        if whole(&journal) {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
        journal = std::fs::read_to_string(node.journal()).unwrap();
    }
    assert!(whole(&journal), "a failed append leaves no partial line (for 1 s): {journal:?}");
    for pid in node.pids() {
        if cpu_cgroup_of(pid).is_some_and(|c| c.contains(&node.sb.name)) {
            assert!(journal.contains(&format!("\"pid\":{pid},")), "pid {pid} moved without a journal entry");
        }
        if policy_of(pid) == libc::SCHED_IDLE {
            assert!(journal.contains(&format!("\"tid\":{pid},")), "pid {pid} SCHED_IDLE without a journal entry");
        }
    }
    for h in Capabilities::probe().hierarchies {
        for (i, dir) in [h.root.join(&node.sb.name), node.sb.cgroup(&h.root, &node.sb.tier("be"))].iter().enumerate() {
            if dir.exists() {
                assert!(journal.contains(&format!("\"path\":\"{}\"", dir.display())), "dir {i} made without an entry");
            }
        }
    }
    let detect = full.0.duration_since(started);
    let mut agent = agent;
    let stop = Instant::now();
    kill(agent.pid(), libc::SIGTERM);
    assert!(wait_for(Duration::from_secs(10), || matches!(agent.0.try_wait(), Ok(Some(_)))).is_some());
    let left = changed(&before, &snapshot(&node.pids(), &node.sb));
    report("node state dir full (8 KiB tmpfs), SIGTERM", Some(detect), stop.elapsed(), &left, lost(&node.pids()));
    assert!(left.is_empty(), "{left:#?}");
    drop(mount);

    // Read-only: nothing can be journaled, so nothing is changed; the error names the fix.
    let Some(_ro) = Mount::tmpfs(&node.sb.state_dir(), "64k", true) else { return };
    let (mut agent, log) = node.agent("run");
    let refused =
        wait_line(&log, Duration::from_secs(10), |l| l.contains("Read-only file system") && l.contains("writable"));
    assert!(refused.is_some(), "the agent names the state dir and the fix");
    assert!(wait_for(Duration::from_secs(10), || matches!(agent.0.try_wait(), Ok(Some(_)))).is_some(), "it exits");
    let left = changed(&before, &snapshot(&node.pids(), &node.sb));
    report("node state dir read-only", Some(Duration::ZERO), Duration::ZERO, &left, lost(&node.pids()));
    assert!(left.is_empty(), "{left:#?}");
    assert_eq!(lost(&node.pids()), 0);
}

#[test]
fn a_cgroup_removed_by_someone_else_is_recreated_and_refilled() {
    if !root_or_skip("a_cgroup_removed_by_someone_else_is_recreated_and_refilled") {
        return;
    }
    let node = Node::new();
    let before = snapshot(&node.pids(), &node.sb);
    let (agent, log) = node.agent("run");
    assert!(wait_for(Duration::from_secs(10), || node.placed() == TARGETS).is_some());
    // Someone empties the best-effort cgroup in every hierarchy and removes it.
    let removed = Instant::now();
    for h in Capabilities::probe().hierarchies {
        let dir = node.sb.cgroup(&h.root, &node.sb.tier("be"));
        for pid in std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default().lines() {
            let _ = std::fs::write(h.root.join("cgroup.procs"), pid);
        }
        assert!(wait_for(Duration::from_secs(5), || std::fs::remove_dir(&dir).is_ok() || !dir.exists()).is_some());
    }
    let seen = wait_line(&log, Duration::from_secs(10), |l| {
        l.contains("removed by someone else") && l.contains(&node.sb.tier("be"))
    })
    .expect("the agent reports the removal");
    let refilled = wait_for(Duration::from_secs(10), || node.placed() == TARGETS).expect("every target placed again");
    let mut agent = agent;
    assert!(matches!(agent.0.try_wait(), Ok(None)), "the agent is still running");
    for pid in node.pids().iter().skip(1).step_by(2) {
        assert_eq!(policy_of(*pid), libc::SCHED_IDLE, "best-effort pid {pid} at SCHED_IDLE again");
    }
    let stop = Instant::now();
    kill(agent.pid(), libc::SIGTERM);
    assert!(wait_for(Duration::from_secs(10), || matches!(agent.0.try_wait(), Ok(Some(_)))).is_some());
    let restore = stop.elapsed();
    let left = changed(&before, &snapshot(&node.pids(), &node.sb));
    println!(
        "  re-created and refilled {:.0} ms after the removal",
        (removed.elapsed() - stop.elapsed()).as_secs_f64() * 1e3
    );
    report(
        "node agent's cgroup removed by someone else",
        Some(seen.0.duration_since(removed)),
        restore,
        &left,
        lost(&node.pids()),
    );
    assert!(refilled < Duration::from_secs(10));
    assert!(left.is_empty(), "{left:#?}");
    assert_eq!(lost(&node.pids()), 0);
}

#[test]
fn sighup_with_a_broken_config_keeps_the_running_one_and_a_good_one_applies() {
    if !root_or_skip("sighup_with_a_broken_config_keeps_the_running_one_and_a_good_one_applies") {
        return;
    }
    let node = Node::new();
    let before = snapshot(&node.pids(), &node.sb);
    let good = std::fs::read_to_string(&node.config).unwrap();
    // Supervised: SIGHUP goes to the supervisor, which passes it on to the agent.
    let (supervisor, log) = node.agent("supervise");
    assert!(wait_for(Duration::from_secs(10), || node.placed() == TARGETS).is_some());
    let agent_pid = || std::fs::read_to_string(node.sb.state_dir().join("agent.pid")).unwrap_or_default();
    let first = agent_pid();
    let cpu = Capabilities::probe().hierarchy(tailor_node::probe::Role::V1Cpu).cloned();
    let shares = || {
        cpu.as_ref().map(|h| {
            std::fs::read_to_string(node.sb.cgroup(&h.root, &node.sb.tier("crit")).join("cpu.shares"))
                .unwrap_or_default()
        })
    };
    let shares_before = shares();
    let path = node.config.display().to_string();
    for (broken, field) in [
        (good.replace("cpu_weight", "cpu_wieght"), "cpu_wieght"),
        (good.replace(&format!("cpus = \"{}\"", Capabilities::probe().online_cpus[0]), "cpus = \"99\""), "cpus"),
    ] {
        std::fs::write(&node.config, &broken).unwrap();
        let sent = Instant::now();
        kill(supervisor.pid(), libc::SIGHUP);
        let (at, line) = wait_line(&log, Duration::from_secs(10), |l| l.contains("reload of"))
            .unwrap_or_else(|| panic!("no reload error for {field}"));
        assert!(line.contains(&path) && line.contains(field) && line.contains("stays in force"), "{line}");
        report(
            &format!("node config reload with an error ({field})"),
            Some(at.duration_since(sent)),
            Duration::ZERO,
            &[],
            0,
        );
        assert_eq!(node.placed(), TARGETS, "still enforcing");
        assert_eq!(shares(), shares_before);
        assert_eq!(agent_pid(), first, "the agent kept running");
    }
    // A good change applies.
    let text = format!("{}\n{}", good.lines().take(5).collect::<Vec<_>>().join("\n"), tiers(&node.sb, 5_000));
    std::fs::write(&node.config, text).unwrap();
    kill(supervisor.pid(), libc::SIGHUP);
    assert!(wait_line(&log, Duration::from_secs(10), |l| l.contains("reloaded")).is_some());
    if cpu.is_some() {
        assert!(
            wait_for(Duration::from_secs(10), || shares().is_some_and(|s| s.trim() == "51200")).is_some(),
            "new weight 5000 → cpu.shares 51200: {:?}",
            shares()
        );
    }
    assert!(wait_for(Duration::from_secs(10), || node.placed() == TARGETS).is_some());
    let mut supervisor = supervisor;
    kill(supervisor.pid(), libc::SIGTERM);
    assert!(wait_for(Duration::from_secs(10), || matches!(supervisor.0.try_wait(), Ok(Some(_)))).is_some());
    let left = changed(&before, &snapshot(&node.pids(), &node.sb));
    assert!(left.is_empty(), "{left:#?}");
    assert_eq!(lost(&node.pids()), 0);
}
