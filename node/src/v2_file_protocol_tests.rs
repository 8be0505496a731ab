//! cgroup v2 FILE-PROTOCOL tests: the agent's real plan, apply, readback, reconcile, journal and
//! restore code run against a fake cgroup2 mount in a temp directory (`cgfs::fake::Kernel`, a
//! model of the interface-file rules of Documentation/admin-guide/cgroup-v2.rst). They check
//! which files the agent writes with which values, in which order, that each change is journaled
//! with its original value before it is made, and that a restore puts every original back and
//! removes every cgroup the agent made. They need no root and no cgroup2 `cpu` controller, and
//! they say nothing about the kernel's scheduling: the v1 path is checked on the real kernel by
//! `node/tests/agent.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::cgfs::fake::{self, Kernel, Op};
use crate::journal::{self, Entry, Journal};
use crate::probe::{Capabilities, Hierarchy, Role};
use crate::{Agent, NodeConfig};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

struct Fixture {
    dir: PathBuf,
    root: PathBuf,
    state: PathBuf,
    /// Unique tier names (no process on the machine carries these as a TAILOR_TIER label).
    crit: String,
    norm: String,
    be: String,
}

impl Fixture {
    /// A fake cgroup2 root offering `cpuset cpu io memory pids`, with `enabled` already in its
    /// `cgroup.subtree_control`, installed as this thread's kernel.
    fn new(enabled: &str) -> Fixture {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{}-{n}", std::process::id());
        let dir = std::env::temp_dir().join(format!("tailor-v2-file-protocol-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        let root = dir.join("cgroup2");
        fake::install(Kernel::new(&root, "cpuset cpu io memory pids", enabled, &[1]));
        Fixture {
            state: dir.join("state"),
            root,
            dir,
            crit: format!("crit-{tag}"),
            norm: format!("norm-{tag}"),
            be: format!("be-{tag}"),
        }
    }

    fn caps(&self) -> Capabilities {
        Capabilities {
            hierarchies: vec![Hierarchy { root: self.root.clone(), role: Role::Unified }],
            online_cpus: vec![0, 1],
            cpu_idle: true,
            cpu_weight: true,
            cpuset: true,
            rt_group: false,
            psi_per_cgroup: true,
            psi_node: true,
            sched_idle: true,
            root: true,
            sched_ext: false,
        }
    }

    /// critical (fenced to CPU 1, weight 10000, matched by `critical_pid`), normal (weight 250,
    /// no fence) and best-effort (fenced to CPU 0, cpu.idle).
    fn agent(&self, critical_pid: Option<u32>) -> Agent {
        let pids = critical_pid.map(|p| p.to_string()).unwrap_or_default();
        let text = format!(
            "state_dir = {:?}\ncgroup_name = \"tailor\"\nwindow_ms = 0\n\
             [[tier]]\nname = \"{}\"\nkind = \"critical\"\ndemand_cpus = 1.0\ncpus = \"1\"\n\
             [tier.match]\npid = [{pids}]\n\
             [[tier]]\nname = \"{}\"\nkind = \"normal\"\ncpu_weight = 250\n\
             [[tier]]\nname = \"{}\"\nkind = \"best-effort\"\ncpus = \"0\"\n",
            self.state.display().to_string(),
            self.crit,
            self.norm,
            self.be
        );
        let config = NodeConfig::parse(&text, "v2-file-protocol.toml").unwrap();
        Agent::new(config, self.caps()).unwrap()
    }

    fn journal(&self) -> PathBuf {
        Journal::path_in(&self.state)
    }

    fn entries(&self) -> Vec<Entry> {
        let text = std::fs::read_to_string(self.journal()).unwrap_or_default();
        text.lines().map(|l| crate::journal::parse_line(l).unwrap()).collect()
    }

    fn p(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.root.clone()
        } else {
            self.root.join(rel)
        }
    }

    /// Applies with the kernel checking that everything is journaled first.
    fn apply(&self, agent: &mut Agent) {
        fake::with(|k| k.journal_check = Some(self.journal()));
        agent.start_enforcing().unwrap();
        fake::with(|k| k.journal_check = None);
    }

    fn kernel<T>(&self, f: impl FnOnce(&mut Kernel) -> T) -> T {
        fake::with(f).expect("fake kernel installed")
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        fake::uninstall();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Every file and directory under `root` with its content.
fn snapshot(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if p.is_dir() {
                out.insert(format!("{rel}/"), String::new());
                stack.push(p);
            } else {
                out.insert(rel, std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    out
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap().trim().to_string()
}

fn s(a: &str, b: &str) -> (String, String) {
    (a.to_string(), b.to_string())
}

#[test]
fn v2_file_protocol_apply_writes_exactly_the_v2_files_in_order() {
    let f = Fixture::new("memory pids");
    let mut agent = f.agent(None);
    f.apply(&mut agent);
    let (c, n, b) = (&f.crit, &f.norm, &f.be);
    let (mkdirs, writes, failures) = f.kernel(|k| {
        let mkdirs: Vec<String> =
            k.log.iter().filter_map(|op| if let Op::Mkdir(p) = op { Some(k.rel(p)) } else { None }).collect();
        (mkdirs, k.writes(), k.failures().len())
    });
    assert_eq!(failures, 0, "a write the kernel would refuse");
    assert_eq!(mkdirs, vec!["tailor".to_string(), format!("tailor/{c}"), format!("tailor/{n}"), format!("tailor/{b}")]);
    // The root and our parent enable cpu and cpuset for their children before any tier file is
    // written; the normal tier's weight 100 default would equal the kernel's, so 250 is used to
    // see it; cpuset.mems is never written (empty = the parent's on v2); no v1 file, no tasks.
    assert_eq!(
        writes,
        vec![
            s("cgroup.subtree_control", "+cpu +cpuset"),
            s("tailor/cgroup.subtree_control", "+cpu +cpuset"),
            s(&format!("tailor/{c}/cpu.weight"), "10000"),
            s(&format!("tailor/{c}/cpuset.cpus"), "1"),
            s(&format!("tailor/{n}/cpu.weight"), "250"),
            s(&format!("tailor/{b}/cpu.idle"), "1"),
            s(&format!("tailor/{b}/cpuset.cpus"), "0"),
        ]
    );
    assert_eq!(read(&f.p("cgroup.subtree_control")), "cpuset cpu memory pids");
    assert_eq!(read(&f.p("tailor/cgroup.controllers")), "cpuset cpu memory pids");
    assert_eq!(read(&f.p("tailor/cgroup.subtree_control")), "cpuset cpu");
    assert_eq!(read(&f.p(&format!("tailor/{c}/cgroup.controllers"))), "cpuset cpu");
    assert_eq!(read(&f.p(&format!("tailor/{c}/cpu.weight"))), "10000");
    assert_eq!(read(&f.p(&format!("tailor/{b}/cpu.idle"))), "1");
    assert_eq!(read(&f.p(&format!("tailor/{b}/cpuset.cpus"))), "0");
    // Per-tier PSI comes from the tier's own cgroup in the same tree.
    assert_eq!(agent.psi_dir(0), Some(f.p(&format!("tailor/{c}")).as_path()));
    agent.safe_mode().unwrap();
}

#[test]
fn v2_file_protocol_journal_records_each_original_before_the_write() {
    let f = Fixture::new("memory pids");
    let mut agent = f.agent(None);
    // `apply` makes the fake kernel panic on any mkdir or write not yet in the journal.
    f.apply(&mut agent);
    let (c, n, b) = (&f.crit, &f.norm, &f.be);
    let dir = |rel: &str| Entry::CreatedDir { path: f.p(rel), fallback_dir: f.root.clone(), rt_band_priority: None };
    let file = |rel: &str, original: &str| Entry::WroteFile { path: f.p(rel), original: original.into() };
    assert_eq!(
        f.entries(),
        vec![
            dir("tailor"),
            // subtree_control is journaled as the "-ctrl" that undoes exactly what we enabled.
            file("cgroup.subtree_control", "-cpu -cpuset"),
            file("tailor/cgroup.subtree_control", "-cpu -cpuset"),
            dir(&format!("tailor/{c}")),
            file(&format!("tailor/{c}/cpu.weight"), "100"),
            file(&format!("tailor/{c}/cpuset.cpus"), ""),
            dir(&format!("tailor/{n}")),
            file(&format!("tailor/{n}/cpu.weight"), "100"),
            dir(&format!("tailor/{b}")),
            file(&format!("tailor/{b}/cpu.idle"), "0"),
            file(&format!("tailor/{b}/cpuset.cpus"), ""),
        ]
    );
    // Each journaled original is the file's content just before the agent's write.
    let writes: Vec<(PathBuf, String)> = f.kernel(|k| {
        k.log
            .iter()
            .filter_map(|op| match op {
                Op::Write { path, before, .. } if !path.ends_with("cgroup.subtree_control") => {
                    Some((path.clone(), before.trim().to_string()))
                }
                _ => None,
            })
            .collect()
    });
    assert_eq!(writes.len(), 5);
    for (path, before) in writes {
        assert!(f.entries().contains(&Entry::WroteFile { path: path.clone(), original: before }), "{path:?}");
    }
    agent.safe_mode().unwrap();
}

#[test]
fn v2_file_protocol_safe_mode_restores_every_original_and_removes_created_cgroups() {
    let f = Fixture::new("memory pids");
    let before = snapshot(&f.root);
    let mut agent = f.agent(None);
    f.apply(&mut agent);
    assert_ne!(snapshot(&f.root), before);
    let applied = f.kernel(|k| k.log.len());
    let report = agent.safe_mode().unwrap();
    // The root's subtree_control can only lose cpu/cpuset once our parent cgroup (which enables
    // them for the tiers) is gone; earlier the kernel answers EBUSY.
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.dirs_removed, 4);
    assert_eq!(report.files_restored, 1);
    assert_eq!(snapshot(&f.root), before, "the tree differs from before the agent ran");
    assert!(!f.journal().exists());
    let restore: Vec<String> = f.kernel(|k| {
        k.log[applied..]
            .iter()
            .map(|op| match op {
                Op::Mkdir(p) => format!("mkdir {}", k.rel(p)),
                Op::Rmdir(p) => format!("rmdir {}", k.rel(p)),
                Op::Write { path, value, .. } => format!("write {} {value}", k.rel(path)),
            })
            .collect()
    });
    let (c, n, b) = (&f.crit, &f.norm, &f.be);
    assert_eq!(
        restore,
        vec![
            format!("rmdir tailor/{b}"),
            format!("rmdir tailor/{n}"),
            format!("rmdir tailor/{c}"),
            "rmdir tailor".to_string(),
            "write cgroup.subtree_control -cpu -cpuset".to_string(),
        ]
    );
    // Idempotent.
    assert_eq!(journal::restore(&f.state).unwrap().entries, 0);
}

#[test]
fn v2_file_protocol_restore_after_a_crash_uses_only_the_journal() {
    let f = Fixture::new("memory pids");
    let before = snapshot(&f.root);
    {
        let mut agent = f.agent(None);
        f.apply(&mut agent);
        // The agent dies (kill -9): nothing but the journal is left.
    }
    let report = journal::restore(&f.state).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(snapshot(&f.root), before);
    // A new agent after a crash restores the leftover first, then applies again.
    let mut agent = f.agent(None);
    f.apply(&mut agent);
    let mut again = f.agent(None);
    let leftover = again.start_enforcing().unwrap().expect("a leftover journal");
    assert!(leftover.errors.is_empty(), "{:?}", leftover.errors);
    assert!(again.readback().iter().all(|r| r.matches), "{:?}", again.readback());
    again.safe_mode().unwrap();
    assert_eq!(snapshot(&f.root), before);
}

#[test]
fn v2_file_protocol_controllers_already_enabled_stay_enabled_after_restore() {
    {
        // The root already enables cpu (e.g. systemd's) but not cpuset.
        let f = Fixture::new("cpu memory");
        let before = snapshot(&f.root);
        let mut agent = f.agent(None);
        f.apply(&mut agent);
        let root_sc = f.p("cgroup.subtree_control");
        assert!(f.entries().contains(&Entry::WroteFile { path: root_sc, original: "-cpuset".into() }));
        let report = agent.safe_mode().unwrap();
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert_eq!(read(&f.p("cgroup.subtree_control")), "cpu memory");
        assert_eq!(snapshot(&f.root), before);
    }

    // Everything already enabled: the root's file is neither written nor journaled.
    let f = Fixture::new("cpuset cpu memory");
    let mut agent = f.agent(None);
    f.apply(&mut agent);
    assert!(!f.kernel(|k| k.writes()).iter().any(|(p, _)| p == "cgroup.subtree_control"));
    assert!(!f
        .entries()
        .iter()
        .any(|e| matches!(e, Entry::WroteFile { path, .. } if *path == f.p("cgroup.subtree_control"))));
    agent.safe_mode().unwrap();
    assert_eq!(read(&f.p("cgroup.subtree_control")), "cpuset cpu memory");
}

#[test]
fn v2_file_protocol_readback_matches_and_reconcile_repairs_a_rewritten_file() {
    let f = Fixture::new("memory pids");
    let before = snapshot(&f.root);
    let mut agent = f.agent(None);
    f.apply(&mut agent);
    let rb = agent.readback();
    let files: Vec<String> = rb.iter().map(|r| f.kernel(|k| k.rel(Path::new(&r.file)))).collect();
    assert_eq!(files.len(), 7, "{files:?}");
    assert!(files.contains(&"cgroup.subtree_control".to_string()));
    assert!(rb.iter().all(|r| r.matches), "{rb:?}");

    // Someone rewrites the critical weight and drops cpuset from our parent's subtree_control.
    let (c, b) = (&f.crit, &f.be);
    let weight = f.p(&format!("tailor/{c}/cpu.weight"));
    f.kernel(|k| {
        k.write(&weight, "100").unwrap();
        k.write(&f.p("tailor/cgroup.subtree_control"), "-cpuset").unwrap();
    });
    // Disabling cpuset removed the tiers' cpuset files: their readback has no value.
    assert!(!f.p(&format!("tailor/{b}/cpuset.cpus")).exists());
    let bad: Vec<String> = agent.readback().into_iter().filter(|r| !r.matches).map(|r| r.file).collect();
    assert_eq!(bad.len(), 4, "{bad:?}");
    let repaired = agent.stats.settings_repaired;
    agent.reconcile().unwrap();
    assert_eq!(agent.stats.settings_repaired - repaired, 4);
    assert!(agent.readback().iter().all(|r| r.matches), "{:?}", agent.readback());
    assert_eq!(read(&weight), "10000");
    // The journal keeps the first original, not the value someone else wrote.
    assert!(f.entries().contains(&Entry::WroteFile { path: weight.clone(), original: "100".into() }));
    assert_eq!(f.entries().iter().filter(|e| matches!(e, Entry::WroteFile { path, .. } if *path == weight)).count(), 1);
    agent.safe_mode().unwrap();
    assert_eq!(snapshot(&f.root), before);
}

#[test]
fn v2_file_protocol_moves_a_process_by_cgroup_procs_and_restore_moves_it_back() {
    let f = Fixture::new("memory pids");
    let mut child =
        crate::procs::start_at_stock_policy(&mut std::process::Command::new("sleep")).arg("30").spawn().unwrap();
    let pid = child.id();
    // Mirror the child's real v2 cgroup (the `0::` line) in the fake tree, with the child in it.
    let real = crate::procs::cgroups(&format!("/proc/{pid}/cgroup"))
        .into_iter()
        .find(|(c, _)| c.is_empty())
        .map(|(_, p)| p)
        .unwrap_or_else(|| "/".into());
    let original_dir = f.p(real.trim_start_matches('/'));
    f.kernel(|k| {
        let mut d = f.root.clone();
        for part in Path::new(real.trim_start_matches('/')).components() {
            d = d.join(part);
            k.mkdir(&d).unwrap();
        }
        k.write(&original_dir.join("cgroup.procs"), &pid.to_string()).unwrap();
        k.log.clear();
    });
    let before = snapshot(&f.root);
    let mut agent = f.agent(Some(pid));
    f.apply(&mut agent);
    let tier = f.p(&format!("tailor/{}", f.crit));
    assert_eq!(read(&tier.join("cgroup.procs")), pid.to_string());
    assert!(!read(&original_dir.join("cgroup.procs")).lines().any(|l| l == pid.to_string()));
    // Whole processes move through cgroup.procs; v2 has no per-thread `tasks` file and a domain
    // cgroup's threads all follow the process.
    let moves: Vec<(String, String)> =
        f.kernel(|k| k.writes()).into_iter().filter(|(p, _)| p.ends_with("cgroup.procs")).collect();
    assert_eq!(moves, vec![s(&format!("tailor/{}/cgroup.procs", f.crit), &pid.to_string())]);
    assert!(f.entries().iter().any(|e| matches!(e,
        Entry::MovedProcess { pid: p, hierarchy, original_dir: o, .. }
            if *p == pid && *hierarchy == f.root && *o == original_dir)));
    assert_eq!(agent.stats.processes_placed, 1);
    let report = agent.safe_mode().unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.processes_moved_back, 1);
    assert_eq!(snapshot(&f.root), before);
    // SAFETY: kill of our own child by pid.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let _ = child.wait();
}

#[test]
fn v2_file_protocol_restore_moves_a_process_to_the_nearest_ancestor_that_takes_it() {
    // The process came from svc/gone; since then svc/gone was removed and svc started enabling
    // cpu for its children, so v2 refuses processes in svc itself (no internal processes).
    let f = Fixture::new("cpu memory");
    let mut child =
        crate::procs::start_at_stock_policy(&mut std::process::Command::new("sleep")).arg("30").spawn().unwrap();
    let pid = child.id();
    let svc = f.p("svc");
    f.kernel(|k| {
        k.mkdir(&svc).unwrap();
        k.write(&svc.join("cgroup.subtree_control"), "+cpu").unwrap();
        k.log.clear();
    });
    let start_time = crate::procs::proc_info(pid).unwrap().start_time;
    let entry = Entry::MovedProcess {
        pid,
        start_time,
        hierarchy: f.root.clone(),
        original_dir: svc.join("gone"),
        original_policy: None,
    };
    let mut j = Journal::open(&f.state).unwrap();
    j.record(entry).unwrap();
    drop(j);
    let report = journal::restore(&f.state).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.processes_moved_back, 1);
    let tries: Vec<(String, i32)> = f.kernel(|k| {
        k.log
            .iter()
            .filter_map(|op| match op {
                Op::Write { path, errno, .. } => Some((k.rel(path), *errno)),
                _ => None,
            })
            .collect()
    });
    assert_eq!(tries, vec![("svc/cgroup.procs".to_string(), libc::EBUSY), ("cgroup.procs".to_string(), 0)]);
    assert!(read(&f.p("cgroup.procs")).lines().any(|l| l == pid.to_string()));
    // SAFETY: kill of our own child by pid.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let _ = child.wait();
}

#[test]
fn v2_file_protocol_probe_uses_the_unified_tree_only_when_its_root_offers_cpu() {
    let f = Fixture::new("");
    let (root, v1) = (f.root.display().to_string(), f.dir.display().to_string());
    let mountinfo = format!(
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
         32 31 0:29 / {v1}/cpu rw,relatime - cgroup cgroup rw,cpu\n\
         34 31 0:31 / {v1}/cpuset rw,relatime - cgroup cgroup rw,cpuset\n\
         41 31 0:38 / {root} rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
    );
    // A pure cgroup2 node: cpu in the root's cgroup.controllers → one Unified hierarchy.
    std::fs::write(f.p("cgroup.controllers"), "cpuset cpu io memory pids\n").unwrap();
    let (h, controllers) = crate::probe::hierarchies_from(&mountinfo);
    assert_eq!(h.iter().map(|h| (h.role, h.root.clone())).collect::<Vec<_>>(), vec![(Role::Unified, f.root.clone())]);
    assert_eq!(controllers.trim(), "cpuset cpu io memory pids");
    // This machine's layout: cgroup2 without cpu → v1 cpu + cpuset, and cgroup2 for PSI only.
    std::fs::write(f.p("cgroup.controllers"), "\n").unwrap();
    std::fs::write(f.p("cgroup.pressure"), "1\n").unwrap();
    let (h, _) = crate::probe::hierarchies_from(&mountinfo);
    let roles: Vec<Role> = h.iter().map(|h| h.role).collect();
    assert_eq!(roles, vec![Role::V1Cpu, Role::V1Cpuset, Role::PsiOnly]);
    // A v2 process line has an empty controller field ("0::/path"); v1 lines never match it.
    let unified = Hierarchy { root: f.root.clone(), role: Role::Unified };
    assert!(unified.owns_line(""));
    assert!(!unified.owns_line("cpu") && !unified.owns_line("name=systemd"));
}
