//! Tiers that select Kubernetes pods by the kubelet's cgroups, on the real kernel: the test
//! builds a kubepods-shaped hierarchy (cgroupfs and systemd drivers) in every mounted cgroup
//! hierarchy, puts real processes in its container cgroups, and checks that the agent tunes
//! the selected pod and container cgroups in place, moves no process out of them, and puts
//! every original value back in safe mode.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use tailor_node::probe::Role;
use tailor_node::{Agent, Capabilities};
use tailor_telemetry::testing::{sample_value, scrape_metrics, Promtool};

/// Cgroups a test made, removed (children first, their processes moved to the root) on
/// drop, pass or fail.
struct Tree {
    dirs: Vec<(PathBuf, PathBuf)>,
}

impl Tree {
    /// Makes `rel` below `root`, each missing level recorded (so each is removed).
    fn mkdir(&mut self, root: &Path, rel: &str) -> PathBuf {
        let mut dir = root.to_path_buf();
        for part in rel.split('/').filter(|p| !p.is_empty()) {
            dir.push(part);
            if !dir.exists() {
                std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
                self.dirs.push((root.to_path_buf(), dir.clone()));
            }
        }
        dir
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        for (root, dir) in self.dirs.iter().rev() {
            for pid in std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default().lines() {
                let _ = std::fs::write(root.join("cgroup.procs"), pid);
            }
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// A process with a name unique to this test (so no other test's tiers match it), in
/// `container` cgroups (one per hierarchy).
fn contained(sb: &Sandbox, comm: &str, containers: &[PathBuf]) -> Proc {
    labelled(sb, comm, None, containers)
}

/// [`contained`], with `TAILOR_TIER=<label>` in its environment (as the downward API puts a
/// pod label there).
fn labelled(sb: &Sandbox, comm: &str, label: Option<&str>, containers: &[PathBuf]) -> Proc {
    let exe = sb.dir.join(comm);
    if !exe.exists() {
        std::fs::copy("/bin/sleep", &exe).unwrap();
    }
    let mut cmd = Command::new(&exe);
    cmd.arg("1000").stdin(Stdio::null()).stdout(Stdio::null()).env_remove("TAILOR_TIER");
    if let Some(l) = label {
        cmd.env("TAILOR_TIER", l);
    }
    // SCHED_OTHER, whatever the test runs at (e.g. under `chrt -i 0`): the checks below tell
    // the tier's SCHED_IDLE from an inherited one.
    let p = Proc(start_at_stock_policy(&mut cmd).spawn().unwrap());
    exec_done(p.pid(), comm, label);
    for c in containers {
        std::fs::write(c.join("cgroup.procs"), p.pid().to_string()).unwrap();
    }
    p
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).trim().to_string()
}

/// The pod and container dirs (relative to the hierarchy root) of one driver's layout.
struct Layout {
    guaranteed_pod: String,
    guaranteed_container: String,
    burstable_pod: String,
    burstable_container: String,
    besteffort_container: String,
}

fn layout(systemd: bool, kubelet_root: &str) -> Layout {
    let (g, u, b) = ("0a1b-guaranteed", "0a1b-burstable", "0a1b-besteffort");
    let under = |s: &str| s.replace('-', "_");
    let r = kubelet_root;
    if systemd {
        let k = format!("{r}/kubepods.slice");
        let gp = format!("{k}/kubepods-pod{}.slice", under(g));
        let up = format!("{k}/kubepods-burstable.slice/kubepods-burstable-pod{}.slice", under(u));
        let bp = format!("{k}/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice", under(b));
        Layout {
            guaranteed_container: format!("{gp}/cri-containerd-aaa.scope"),
            burstable_container: format!("{up}/cri-containerd-bbb.scope"),
            besteffort_container: format!("{bp}/cri-containerd-ccc.scope"),
            guaranteed_pod: gp,
            burstable_pod: up,
        }
    } else {
        let k = format!("{r}/kubepods");
        let (gp, up, bp) = (format!("{k}/pod{g}"), format!("{k}/burstable/pod{u}"), format!("{k}/besteffort/pod{b}"));
        Layout {
            guaranteed_container: format!("{gp}/c0ffee"),
            burstable_container: format!("{up}/c0ffee"),
            besteffort_container: format!("{bp}/c0ffee"),
            guaranteed_pod: gp,
            burstable_pod: up,
        }
    }
}

fn pod_tiers_tune_the_kubelets_cgroups_in_place(systemd: bool) {
    let caps = Capabilities::probe();
    let sb = Sandbox::new();
    let kubelet_root = format!("/{}-kubelet", sb.name);
    let l = layout(systemd, &kubelet_root);
    // The kubelet's tree, in the hierarchies a process's cpu placement and PSI live in.
    let mut tree = Tree { dirs: Vec::new() };
    let hierarchies: Vec<_> =
        caps.hierarchies.iter().filter(|h| matches!(h.role, Role::V1Cpu | Role::Unified | Role::PsiOnly)).collect();
    let mut containers = [Vec::new(), Vec::new(), Vec::new()];
    for h in &hierarchies {
        tree.mkdir(&h.root, &kubelet_root);
        for (i, c) in [&l.guaranteed_container, &l.burstable_container, &l.besteffort_container].iter().enumerate() {
            containers[i].push(tree.mkdir(&h.root, c));
        }
    }
    let comm = format!("tk8s{}", std::process::id() % 100_000);
    let guaranteed = contained(&sb, &comm, &containers[0]);
    let burstable = contained(&sb, &comm, &containers[1]);
    let besteffort = contained(&sb, &comm, &containers[2]);
    let placed: Vec<Option<String>> =
        [&guaranteed, &burstable, &besteffort].iter().map(|p| cpu_cgroup_of(p.pid())).collect();
    let originals: Vec<(PathBuf, String)> = hierarchies
        .iter()
        .filter(|h| h.role == Role::V1Cpu)
        .flat_map(|h| {
            [
                h.root.join(l.guaranteed_pod.trim_start_matches('/')).join("cpu.shares"),
                h.root.join(l.burstable_pod.trim_start_matches('/')).join("cpu.shares"),
                h.root.join(l.besteffort_container.trim_start_matches('/')).join("cpu.idle"),
            ]
        })
        .filter(|f| f.exists())
        .map(|f| (f.clone(), read(&f)))
        .collect();

    // Guaranteed pods critical, best-effort pods' containers idle; and an ordinary tier whose
    // process selector matches all three processes by name: they are in the kubelet's cgroups,
    // so it must leave them there.
    let (_, mut config) = sb.config(&format!(
        "[[tier]]\nname = \"{crit}\"\nkind = \"critical\"\ncpu_weight = 10000\n[tier.pods]\nqos = [\"guaranteed\"]\n\
         [[tier]]\nname = \"{be}\"\nkind = \"best-effort\"\n[tier.pods]\nqos = [\"besteffort\"]\ncontainer = [\"*/{cont}\"]\n\
         [[tier]]\nname = \"{norm}\"\nkind = \"normal\"\n[tier.match]\ncomm = [\"{comm}\"]\n",
        crit = sb.tier("crit"),
        be = sb.tier("be"),
        norm = sb.tier("norm"),
        cont = if systemd { "cri-containerd-*.scope" } else { "c0ffee" },
    ));
    config.kubelet_cgroup_root = kubelet_root.clone();
    let mut agent = Agent::new(config, caps.clone()).unwrap();
    if let Err(e) = agent.start_enforcing() {
        panic!("start_enforcing: {e}; RT budgets held now: {}", rt_budgets_held(&caps));
    }
    agent.reconcile().unwrap();

    let after: Vec<Option<String>> =
        [&guaranteed, &burstable, &besteffort].iter().map(|p| cpu_cgroup_of(p.pid())).collect();
    assert_eq!(after, placed, "no process moved out of the kubelet's cgroups");
    assert!(agent.stats.kubelet_owned_not_moved >= 3, "{:?}", agent.stats);
    let tunable = hierarchies.iter().filter(|h| matches!(h.role, Role::V1Cpu | Role::Unified)).count();
    assert_eq!(
        agent.stats.pod_cgroups,
        2 * tunable,
        "one guaranteed pod, one best-effort container: {:?}",
        agent.stats
    );
    for h in &hierarchies {
        let at = |rel: &str, file: &str| h.root.join(rel.trim_start_matches('/')).join(file);
        match h.role {
            Role::V1Cpu => {
                assert_eq!(read(&at(&l.guaranteed_pod, "cpu.shares")), "102400");
                if caps.cpu_idle {
                    assert_eq!(read(&at(&l.besteffort_container, "cpu.idle")), "1");
                }
                assert_eq!(read(&at(&l.burstable_pod, "cpu.shares")), "1024", "an unselected pod is untouched");
            }
            Role::Unified => {
                assert_eq!(read(&at(&l.guaranteed_pod, "cpu.weight")), "10000");
                assert_eq!(read(&at(&l.besteffort_container, "cpu.idle")), "1");
            }
            _ => {}
        }
    }

    let report = agent.safe_mode().unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    for (file, value) in &originals {
        assert_eq!(&read(file), value, "{} restored", file.display());
    }
    for (_, dir) in &tree.dirs {
        assert!(dir.exists(), "safe mode removed {}, which the kubelet owns", dir.display());
    }
    assert_eq!(
        [&guaranteed, &burstable, &besteffort].iter().map(|p| cpu_cgroup_of(p.pid())).collect::<Vec<_>>(),
        placed
    );
    drop(tree);
    for h in &hierarchies {
        let left = h.root.join(kubelet_root.trim_start_matches('/'));
        assert!(!left.exists(), "the test's tree is removed: {}", left.display());
    }
}

/// Every v1 cpu cgroup holding an RT budget (what a test that cannot get one competes with).
fn rt_budgets_held(caps: &Capabilities) -> String {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        if let Ok(v) = std::fs::read_to_string(dir.join("cpu.rt_runtime_us")) {
            if v.trim() != "0" {
                out.push(format!("{} = {}", dir.display(), v.trim()));
            }
        }
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&e.path(), out);
            }
        }
    }
    let mut out = Vec::new();
    for h in caps.hierarchies.iter().filter(|h| h.role == Role::V1Cpu) {
        walk(&h.root, &mut out);
    }
    out.join(", ")
}

/// The two drivers' tests share the root's RT budget (the ordinary tier's parent takes some):
/// they take turns.
static RT_BUDGET: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn pod_tiers_tune_cgroupfs_driver_pods_in_place_and_restore() {
    let _turn = RT_BUDGET.lock().unwrap_or_else(|p| p.into_inner());
    if root_or_skip("pod_tiers_tune_cgroupfs_driver_pods_in_place_and_restore") {
        pod_tiers_tune_the_kubelets_cgroups_in_place(false);
    }
}

#[test]
fn pod_tiers_tune_systemd_driver_pods_in_place_and_restore() {
    let _turn = RT_BUDGET.lock().unwrap_or_else(|p| p.into_inner());
    if root_or_skip("pod_tiers_tune_systemd_driver_pods_in_place_and_restore") {
        pod_tiers_tune_the_kubelets_cgroups_in_place(true);
    }
}

#[test]
fn pod_tiers_refuse_a_fence_and_process_selectors() {
    let text = "[[tier]]\nname = \"c\"\nkind = \"critical\"\ncpus = \"1\"\n[tier.pods]\nqos = [\"guaranteed\"]\n\
                [tier.match]\ncomm = [\"x\"]\n";
    let err = tailor_node::NodeConfig::parse(text, "n.toml").unwrap_err().to_string();
    assert!(err.contains("cpuManagerPolicy") && err.contains("[tier.match] with [tier.pods]"), "{err}");
    let err = tailor_node::NodeConfig::parse(
        "[[tier]]\nname = \"c\"\nkind = \"critical\"\n[tier.pods]\nqos = [\"gold\"]\n",
        "n.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("gold") && err.contains("guaranteed"), "{err}");
    let err = tailor_node::NodeConfig::parse(
        "[[tier]]\nname = \"c\"\nkind = \"critical\"\nrt_runtime_us = 500000\n[tier.pods]\nqos = [\"guaranteed\"]\n",
        "n.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("rt_runtime_us") && err.contains("[tier.pods]") && err.contains("Fix: remove"), "{err}");
}

/// One pod of the label test: its dir and containers (relative to the hierarchy root).
struct LabelLayout {
    /// Burstable, two containers: `app` carries the critical label, `sidecar` none.
    shop_pod: String,
    shop_app: String,
    shop_sidecar: String,
    /// Burstable, no label anywhere: untouched.
    plain_pod: String,
    plain_container: String,
    /// Best-effort, one container whose processes carry the batch label.
    batch_pod: String,
    batch_container: String,
}

fn label_layout(systemd: bool, kubelet_root: &str) -> LabelLayout {
    let r = kubelet_root;
    let pod = |qos: &str, uid: &str| {
        if systemd {
            let uid = uid.replace('-', "_");
            format!("{r}/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid}.slice")
        } else {
            format!("{r}/kubepods/{qos}/pod{uid}")
        }
    };
    let container = |id: &str| if systemd { format!("cri-containerd-{id}.scope") } else { id.to_string() };
    let (shop, plain, batch) =
        (pod("burstable", "5a0e-shop"), pod("burstable", "5a0e-plain"), pod("besteffort", "5a0e-batch"));
    LabelLayout {
        shop_app: format!("{shop}/{}", container("a11")),
        shop_sidecar: format!("{shop}/{}", container("b22")),
        plain_container: format!("{plain}/{}", container("c33")),
        batch_container: format!("{batch}/{}", container("d44")),
        shop_pod: shop,
        plain_pod: plain,
        batch_pod: batch,
    }
}

/// The cpu setting a tier writes in one hierarchy's cgroup `rel`: v1 `cpu.shares`, v2
/// `cpu.weight` (None elsewhere).
fn weight_file(h: &tailor_node::probe::Hierarchy, rel: &str) -> Option<PathBuf> {
    let file = match h.role {
        Role::V1Cpu => "cpu.shares",
        Role::Unified => "cpu.weight",
        _ => return None,
    };
    Some(h.root.join(rel.trim_start_matches('/')).join(file))
}

fn pods_opt_in_by_their_tier_label(systemd: bool) {
    let caps = Capabilities::probe();
    let sb = Sandbox::new();
    let kubelet_root = format!("/{}-kubelet", sb.name);
    let l = label_layout(systemd, &kubelet_root);
    let mut tree = Tree { dirs: Vec::new() };
    let hierarchies: Vec<_> =
        caps.hierarchies.iter().filter(|h| matches!(h.role, Role::V1Cpu | Role::Unified | Role::PsiOnly)).collect();
    let tunable: Vec<_> = hierarchies.iter().filter(|h| matches!(h.role, Role::V1Cpu | Role::Unified)).collect();
    let mut dirs = |rel: &str| hierarchies.iter().map(|h| tree.mkdir(&h.root, rel)).collect::<Vec<_>>();
    let (app, sidecar, plain, batch) =
        (dirs(&l.shop_app), dirs(&l.shop_sidecar), dirs(&l.plain_container), dirs(&l.batch_container));

    // Labels as the downward API would set them: unique to this test, so parallel tests'
    // processes never carry them.
    let (crit_label, batch_label) = (sb.tier("critical"), sb.tier("batch"));
    let comm = format!("tlbl{}", std::process::id() % 100_000);
    let mut shop_app = labelled(&sb, &comm, Some(&crit_label), &app);
    let shop_sidecar = labelled(&sb, &comm, None, &sidecar);
    let plain_proc = labelled(&sb, &comm, Some("no-tier-has-this-label"), &plain);
    let batch_worker = labelled(&sb, &comm, Some(&batch_label), &batch);
    let batch_helper = labelled(&sb, &comm, None, &batch);
    let everyone = |ps: &[&Proc]| ps.iter().map(|p| cpu_cgroup_of(p.pid())).collect::<Vec<_>>();
    let placed = everyone(&[&shop_app, &shop_sidecar, &plain_proc, &batch_worker, &batch_helper]);

    // Every value the agent may touch, before it runs.
    let mut watched: Vec<PathBuf> = Vec::new();
    for h in &tunable {
        for rel in [&l.shop_pod, &l.shop_app, &l.plain_pod, &l.batch_pod] {
            watched.extend(weight_file(h, rel));
        }
        watched.push(h.root.join(l.batch_container.trim_start_matches('/')).join("cpu.idle"));
    }
    watched.retain(|f| f.exists());
    let originals: Vec<(PathBuf, String)> = watched.iter().map(|f| (f.clone(), read(f))).collect();
    let original = |f: &Path| originals.iter().find(|(p, _)| p == f).map(|(_, v)| v.clone()).unwrap();

    // Pods labelled critical are critical (whole pod); the batch label makes the matching
    // container idle with SCHED_IDLE threads; an ordinary tier matches every process by name
    // and must leave them in the kubelet's cgroups.
    let (_, mut config) = sb.config(&format!(
        "[[tier]]\nname = \"{crit}\"\nkind = \"critical\"\ncpu_weight = 10000\n[tier.pods]\ntier_label = \"{crit_label}\"\n\
         [[tier]]\nname = \"{be}\"\nkind = \"best-effort\"\nsched_idle = true\n[tier.pods]\ntier_label = \"{batch_label}\"\n\
         container = [\"*/{cont}\"]\n\
         [[tier]]\nname = \"{norm}\"\nkind = \"normal\"\n[tier.match]\ncomm = [\"{comm}\"]\n",
        crit = sb.tier("crit"),
        be = sb.tier("be"),
        norm = sb.tier("norm"),
        cont = if systemd { "cri-containerd-*.scope" } else { "d44" },
    ));
    config.kubelet_cgroup_root = kubelet_root.clone();
    let mut agent = Agent::new(config, caps.clone()).unwrap();
    agent.start_enforcing().unwrap();
    agent.reconcile().unwrap();

    assert_eq!(
        everyone(&[&shop_app, &shop_sidecar, &plain_proc, &batch_worker, &batch_helper]),
        placed,
        "no process moved"
    );
    assert_eq!(agent.stats.pod_cgroups, 2 * tunable.len(), "the shop pod and the batch container: {:?}", agent.stats);
    for h in &tunable {
        let shop = weight_file(h, &l.shop_pod).unwrap();
        assert_eq!(read(&shop), if h.role == Role::V1Cpu { "102400" } else { "10000" }, "{}", shop.display());
        for rel in [&l.plain_pod, &l.batch_pod, &l.shop_app] {
            let f = weight_file(h, rel).unwrap();
            assert_eq!(read(&f), original(&f), "{} is not selected", f.display());
        }
        let idle = h.root.join(l.batch_container.trim_start_matches('/')).join("cpu.idle");
        if caps.cpu_idle {
            assert_eq!(read(&idle), "1", "{}", idle.display());
        }
    }
    for p in [&batch_worker, &batch_helper] {
        assert_eq!(policy_of(p.pid()), libc::SCHED_IDLE, "every process of the batch container");
    }
    for p in [&shop_app, &plain_proc] {
        assert_eq!(policy_of(p.pid()), libc::SCHED_OTHER);
    }

    // The labelled process leaves; the sidecar stays: the pod is no longer selected and gets
    // its values back at the next reconcile. A new labelled process selects it again.
    drop(shop_app);
    agent.reconcile().unwrap();
    for h in &tunable {
        let shop = weight_file(h, &l.shop_pod).unwrap();
        assert_eq!(read(&shop), original(&shop), "{} put back when no process carries the label", shop.display());
    }
    assert!(agent.stats.pod_changes_released >= tunable.len() as u64, "{:?}", agent.stats);
    shop_app = labelled(&sb, &comm, Some(&crit_label), &app);
    agent.reconcile().unwrap();
    for h in &tunable {
        let shop = weight_file(h, &l.shop_pod).unwrap();
        assert_eq!(read(&shop), if h.role == Role::V1Cpu { "102400" } else { "10000" }, "selected again");
    }
    // The batch worker leaves: its helper's SCHED_IDLE is put back while the agent runs.
    drop(batch_worker);
    agent.reconcile().unwrap();
    assert_eq!(policy_of(batch_helper.pid()), libc::SCHED_OTHER, "policy released with the container");
    let idle =
        |h: &tailor_node::probe::Hierarchy| h.root.join(l.batch_container.trim_start_matches('/')).join("cpu.idle");
    for h in tunable.iter().filter(|_| caps.cpu_idle) {
        assert_eq!(read(&idle(h)), original(&idle(h)), "{}", idle(h).display());
    }

    let report = agent.safe_mode().unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    for (file, value) in &originals {
        assert_eq!(&read(file), value, "{} restored", file.display());
    }
    assert_eq!(
        everyone(&[&shop_app, &shop_sidecar, &plain_proc, &batch_helper])[..],
        [&placed[..3], &placed[4..]].concat()[..]
    );
    assert_eq!(policy_of(shop_app.pid()), libc::SCHED_OTHER);
    for (_, dir) in &tree.dirs {
        assert!(dir.exists(), "safe mode removed {}, which the kubelet owns", dir.display());
    }
}

#[test]
fn pods_opt_in_by_tier_label_cgroupfs_driver() {
    let _turn = RT_BUDGET.lock().unwrap_or_else(|p| p.into_inner());
    if root_or_skip("pods_opt_in_by_tier_label_cgroupfs_driver") {
        pods_opt_in_by_their_tier_label(false);
    }
}

#[test]
fn pods_opt_in_by_tier_label_systemd_driver() {
    let _turn = RT_BUDGET.lock().unwrap_or_else(|p| p.into_inner());
    if root_or_skip("pods_opt_in_by_tier_label_systemd_driver") {
        pods_opt_in_by_their_tier_label(true);
    }
}

#[test]
fn a_bad_tier_label_is_named_with_file_and_field() {
    let pods = |body: &str| format!("[[tier]]\nname = \"c\"\nkind = \"critical\"\n[tier.pods]\n{body}\n");
    let err = tailor_node::NodeConfig::parse(&pods("tier_lable = \"critical\""), "n.toml").unwrap_err().to_string();
    assert!(err.contains("n.toml:5") && err.contains("tier_lable") && err.contains("tier_label"), "{err}");
    let err = tailor_node::NodeConfig::parse(&pods("tier_label = \"\""), "n.toml").unwrap_err().to_string();
    assert!(err.contains("n.toml") && err.contains("tier_label \"\": is empty"), "{err}");
    let err = tailor_node::NodeConfig::parse(&pods("tier_label = \"gold tier\""), "n.toml").unwrap_err().to_string();
    assert!(err.contains("tier \"c\"") && err.contains("tier_label \"gold tier\"") && err.contains("letters"), "{err}");
    let err = tailor_node::NodeConfig::parse(&pods("tier_label = \"-x\""), "n.toml").unwrap_err().to_string();
    assert!(err.contains("begin and end"), "{err}");
    tailor_node::NodeConfig::parse(&pods("tier_label = \"critical\"\nqos = [\"guaranteed\"]"), "n.toml").unwrap();
}

/// The agent binary, SIGTERM: a pod selected by its label gets the tier's weight while the
/// agent runs (and `/metrics` counts it, then its release) and its own value back when the
/// agent stops. The tier asks for the SCHED_RR band as the chart's default does: where the
/// kernel schedules RT per cgroup (RT_GROUP_SCHED; the kubelet's cgroups have no RT budget)
/// the agent runs without it and says so in `/metrics`, elsewhere the pod's threads get it.
#[test]
fn a_labelled_pods_weight_is_restored_at_sigterm() {
    let _turn = RT_BUDGET.lock().unwrap_or_else(|p| p.into_inner());
    if !root_or_skip("a_labelled_pods_weight_is_restored_at_sigterm") {
        return;
    }
    let caps = Capabilities::probe();
    let sb = Sandbox::new();
    let kubelet_root = format!("/{}-kubelet", sb.name);
    let l = label_layout(true, &kubelet_root);
    let mut tree = Tree { dirs: Vec::new() };
    let tunable: Vec<_> = caps.hierarchies.iter().filter(|h| matches!(h.role, Role::V1Cpu | Role::Unified)).collect();
    let app: Vec<PathBuf> = tunable.iter().map(|h| tree.mkdir(&h.root, &l.shop_app)).collect();
    let label = sb.tier("critical");
    let comm = format!("tsig{}", std::process::id() % 100_000);
    let shop = labelled(&sb, &comm, Some(&label), &app);
    let placed = cpu_cgroup_of(shop.pid());
    let files: Vec<PathBuf> = tunable.iter().filter_map(|h| weight_file(h, &l.shop_pod)).collect();
    let originals: Vec<String> = files.iter().map(|f| read(f)).collect();
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let (config, _) = sb.config(&format!(
        "kubelet_cgroup_root = \"{kubelet_root}\"\nmetrics_addr = \"{addr}\"\n[[tier]]\nname = \"{}\"\nkind = \"critical\"\n\
         cpu_weight = 10000\nrt_priority = 1\n[tier.pods]\ntier_label = \"{label}\"\n",
        sb.tier("crit")
    ));
    let agent = Proc(Command::new(BIN).arg("run").arg("--config").arg(&config).stderr(Stdio::null()).spawn().unwrap());
    let tuned = || files.iter().all(|f| ["102400", "10000"].contains(&read(f).as_str()));
    assert!(wait_for(std::time::Duration::from_secs(10), tuned).is_some(), "the agent did not tune the labelled pod");
    assert_eq!(cpu_cgroup_of(shop.pid()), placed, "not moved");

    // /metrics counts the selected pod (one cgroup per tunable hierarchy), valid for promtool;
    // when its labelled process leaves, the pod is released and counted.
    let metric = |name: &str| scrape_metrics(addr).ok().and_then(|s| sample_value(&s.body, name));
    let selected = tunable.len() as f64;
    let counted = wait_for(std::time::Duration::from_secs(10), || metric("tailor_node_pod_cgroups") == Some(selected));
    assert!(counted.is_some(), "tailor_node_pod_cgroups never reached {selected}");
    let scrape = scrape_metrics(addr).unwrap();
    match &scrape.promtool {
        Promtool::Clean => {}
        Promtool::Absent => eprintln!("skipping promtool: not installed (apt-get install prometheus)"),
        Promtool::Problems(p) => panic!("promtool check metrics: {p}\n{}", scrape.body),
    }
    // The band: unavailable in the kubelet's cgroups on an RT_GROUP_SCHED kernel (the agent
    // started anyway, weight only), in force elsewhere.
    let rt_band = format!("tailor_node_tier_rt_band_unavailable{{tier=\"{}\"}}", sb.tier("crit"));
    assert_eq!(sample_value(&scrape.body, &rt_band), Some(f64::from(u8::from(caps.rt_group))), "{}", scrape.body);
    let band = || policy_of(shop.pid()) == libc::SCHED_RR;
    if caps.rt_group {
        assert_eq!(policy_of(shop.pid()), libc::SCHED_OTHER, "no band without an RT budget");
    } else {
        assert!(wait_for(std::time::Duration::from_secs(10), band).is_some(), "the pod's thread in the band");
    }
    assert_eq!(sample_value(&scrape.body, "tailor_node_pod_changes_released_total"), Some(0.0));
    assert_eq!(sample_value(&scrape.body, "tailor_node_kubelet_owned_not_moved_total"), Some(0.0));
    drop(shop);
    let released = wait_for(std::time::Duration::from_secs(10), || {
        metric("tailor_node_pod_cgroups") == Some(0.0)
            && metric("tailor_node_pod_changes_released_total").is_some_and(|n| n >= selected)
    });
    assert!(released.is_some(), "the released pod was not counted: {}", scrape_metrics(addr).unwrap().body);
    for (f, v) in files.iter().zip(&originals) {
        assert_eq!(&read(f), v, "{} put back once no process carries the label", f.display());
    }
    let shop = labelled(&sb, &comm, Some(&label), &app);
    assert!(wait_for(std::time::Duration::from_secs(10), tuned).is_some(), "a new labelled process selects it again");

    // SAFETY: SIGTERM to the agent process this test started.
    unsafe { libc::kill(agent.pid() as i32, libc::SIGTERM) };
    let mut child = agent;
    let stopped = wait_for(std::time::Duration::from_secs(10), || child.0.try_wait().ok().flatten().is_some());
    assert!(stopped.is_some(), "the node agent did not stop on SIGTERM");
    for (f, v) in files.iter().zip(&originals) {
        assert_eq!(&read(f), v, "{} restored at SIGTERM", f.display());
    }
    assert_eq!(cpu_cgroup_of(shop.pid()), placed);
    assert_eq!(policy_of(shop.pid()), libc::SCHED_OTHER, "its own policy back at SIGTERM");
}

/// The node config the chart ships (`deploy/kubernetes/tailor.yaml`, which CI checks is the
/// chart's rendering with its default values).
fn charts_node_config() -> tailor_node::NodeConfig {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes/tailor.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = yaml.lines().skip_while(|l| l.trim() != "node.toml: |").skip(1);
    let first = lines.next().expect("node.toml has a body");
    let indent = first.len() - first.trim_start().len();
    let body: Vec<&str> = std::iter::once(first)
        .chain(lines.take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() >= indent))
        .map(|l| l.get(indent..).unwrap_or(""))
        .collect();
    tailor_node::NodeConfig::parse(&body.join("\n"), "node.toml").expect("the chart's node.toml parses")
}

/// A node shape (no files are read or written: pod tiers create no cgroups of their own).
fn shape(role: Role, rt_group: bool) -> Capabilities {
    Capabilities {
        hierarchies: vec![tailor_node::probe::Hierarchy { root: PathBuf::from("/nonexistent-cgroup-root"), role }],
        online_cpus: vec![0, 1],
        cpu_idle: true,
        cpu_weight: true,
        cpuset: true,
        rt_group,
        psi_per_cgroup: true,
        psi_node: true,
        sched_idle: true,
        root: true,
        sched_ext: false,
    }
}

/// The chart's default critical tier asks for the SCHED_RR band; the agent starts with it
/// on every kernel: where RT is scheduled per cgroup (RT_GROUP_SCHED, cgroup v1 with
/// `cpu.rt_runtime_us`) the kubelet's cgroups have no RT budget, so it runs on its weight
/// alone and warns; elsewhere the band is in force.
#[test]
fn the_charts_default_tiers_run_with_or_without_rt_group_scheduling() {
    let config = charts_node_config();
    let critical = config.tiers.iter().find(|t| t.name == "critical").expect("a critical tier");
    assert_eq!(critical.rt_priority, Some(1), "the chart's default asks for the band");

    let agent = Agent::new(config.clone(), shape(Role::V1Cpu, true)).expect("runs on an RT_GROUP_SCHED kernel");
    let plan = agent.tiers.iter().find(|t| t.name == "critical").unwrap();
    assert_eq!((plan.rt_band_priority, plan.rt_band_unavailable), (None, true));
    assert!(plan.mechanisms.iter().any(|m| m == "weight 10000"), "{:?}", plan.mechanisms);
    let warned = agent.warnings.iter().find(|w| w.contains("\"critical\"") && w.contains("RT_GROUP_SCHED"));
    assert!(warned.is_some_and(|w| w.contains("rt_priority 1 not applied")), "{:?}", agent.warnings);

    let agent = Agent::new(config, shape(Role::Unified, false)).expect("runs without RT group scheduling");
    let plan = agent.tiers.iter().find(|t| t.name == "critical").unwrap();
    assert_eq!((plan.rt_band_priority, plan.rt_band_unavailable), (Some(1), false));
    assert!(!agent.warnings.iter().any(|w| w.contains("not applied")), "{:?}", agent.warnings);
}
