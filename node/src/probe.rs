//! Start-up probe: which cgroup layout and scheduling mechanisms this kernel offers.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::config::parse_cpu_list;

/// What one mounted cgroup hierarchy is used for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// v1 `cpu` controller: shares, idle, RT budget.
    V1Cpu,
    /// v1 `cpuset` controller: the fence.
    V1Cpuset,
    /// cgroup2 without the cpu controller (hybrid machines): only PSI attribution.
    PsiOnly,
    /// cgroup2 with the cpu controller: weight, idle, cpuset and PSI in one tree.
    Unified,
}

/// A cgroup hierarchy the agent uses.
#[derive(Clone, Debug)]
pub struct Hierarchy {
    pub root: PathBuf,
    pub role: Role,
}

impl Hierarchy {
    /// Whether a `/proc/PID/cgroup` line's controller field refers to this hierarchy.
    pub fn owns_line(&self, controllers: &str) -> bool {
        match self.role {
            Role::V1Cpu => controllers.split(',').any(|c| c == "cpu"),
            Role::V1Cpuset => controllers.split(',').any(|c| c == "cpuset"),
            Role::PsiOnly | Role::Unified => controllers.is_empty(),
        }
    }
    /// The file a whole process is moved with.
    pub fn procs_file(dir: &Path) -> PathBuf {
        dir.join("cgroup.procs")
    }
}

/// Everything the agent found at start-up.
#[derive(Clone, Debug)]
pub struct Capabilities {
    pub hierarchies: Vec<Hierarchy>,
    pub online_cpus: Vec<usize>,
    /// `cpu.idle` exists (v1 or v2).
    pub cpu_idle: bool,
    /// Weights: v1 `cpu.shares` or v2 `cpu.weight`.
    pub cpu_weight: bool,
    /// A cpuset controller we can fence with.
    pub cpuset: bool,
    /// v1 RT_GROUP_SCHED (`cpu.rt_runtime_us`): SCHED_FIFO threads need a budget in their group.
    pub rt_group: bool,
    /// Per-cgroup `cpu.pressure`.
    pub psi_per_cgroup: bool,
    /// `/proc/pressure/cpu`.
    pub psi_node: bool,
    /// SCHED_IDLE can be set (we are root or have CAP_SYS_NICE; SCHED_IDLE itself needs none).
    pub sched_idle: bool,
    /// We can write cgroups and set RT policies.
    pub root: bool,
    /// sched_ext present (not needed; reported for completeness).
    pub sched_ext: bool,
}

impl Capabilities {
    /// Probes `/proc/self/mountinfo`, the cgroup roots and `/proc/pressure`.
    pub fn probe() -> Capabilities {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let (hierarchies, v2_controllers) = hierarchies_from(&mountinfo);
        let v2_has = |c: &str| v2_controllers.split_whitespace().any(|x| x == c);
        let has = |role: Role, file: &str| hierarchies.iter().any(|h| h.role == role && h.root.join(file).exists());
        // The root cgroup has no cpu.weight/cpu.idle files in v2; the controller's presence implies them.
        let unified = hierarchies.iter().any(|h| h.role == Role::Unified);
        let cpu_idle = has(Role::V1Cpu, "cpu.idle") || (unified && kernel_at_least(5, 15));
        let cpu_weight = has(Role::V1Cpu, "cpu.shares") || unified;
        let cpuset = hierarchies.iter().any(|h| h.role == Role::V1Cpuset) || (unified && v2_has("cpuset"));
        let rt_group = has(Role::V1Cpu, "cpu.rt_runtime_us");
        // The root of a v2 tree has no cpu.pressure of its own on some kernels; a child does when
        // PSI is on, which /proc/pressure tells us.
        let psi_node = Path::new("/proc/pressure/cpu").exists();
        let psi_per_cgroup = psi_node && hierarchies.iter().any(|h| matches!(h.role, Role::PsiOnly | Role::Unified));
        let online_cpus = std::fs::read_to_string("/sys/devices/system/cpu/online")
            .ok()
            .and_then(|s| parse_cpu_list(&s).ok())
            .unwrap_or_else(|| (0..std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)).collect());
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        Capabilities {
            hierarchies,
            online_cpus,
            cpu_idle,
            cpu_weight,
            cpuset,
            rt_group,
            psi_per_cgroup,
            psi_node,
            sched_idle: true,
            root,
            sched_ext: Path::new("/sys/kernel/sched_ext").exists(),
        }
    }

    pub fn hierarchy(&self, role: Role) -> Option<&Hierarchy> {
        self.hierarchies.iter().find(|h| h.role == role)
    }

    /// The hierarchy that carries per-tier PSI.
    pub fn psi_hierarchy(&self) -> Option<&Hierarchy> {
        self.hierarchies.iter().find(|h| matches!(h.role, Role::PsiOnly | Role::Unified))
    }
}

/// The hierarchies the agent uses, from `/proc/self/mountinfo` text and the cgroup2 root's
/// `cgroup.controllers` (returned too): the cgroup2 mount alone (`Unified`) when its root offers
/// the `cpu` controller, else the v1 `cpu` and `cpuset` mounts plus cgroup2 for PSI only.
pub(crate) fn hierarchies_from(mountinfo: &str) -> (Vec<Hierarchy>, String) {
    let mut v1_cpu = None;
    let mut v1_cpuset = None;
    let mut v2 = None;
    for line in mountinfo.lines() {
        // "36 25 0:31 / /sys/fs/cgroup/cpu rw,... shared:1 - cgroup cgroup rw,cpu"
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let mount_point = left.split(' ').nth(4).unwrap_or("");
        let mut rf = right.split(' ');
        let fstype = rf.next().unwrap_or("");
        let super_opts = rf.nth(1).unwrap_or("");
        match fstype {
            "cgroup" => {
                let opts: Vec<&str> = super_opts.split(',').collect();
                if opts.contains(&"cpu") && v1_cpu.is_none() {
                    v1_cpu = Some(PathBuf::from(mount_point));
                }
                if opts.contains(&"cpuset") && v1_cpuset.is_none() {
                    v1_cpuset = Some(PathBuf::from(mount_point));
                }
            }
            "cgroup2" if v2.is_none() => v2 = Some(PathBuf::from(mount_point)),
            _ => {}
        }
    }
    let v2_controllers =
        v2.as_ref().and_then(|p| std::fs::read_to_string(p.join("cgroup.controllers")).ok()).unwrap_or_default();
    let mut hierarchies = Vec::new();
    if let (Some(root), true) = (&v2, v2_controllers.split_whitespace().any(|x| x == "cpu")) {
        hierarchies.push(Hierarchy { root: root.clone(), role: Role::Unified });
    } else {
        if let Some(root) = v1_cpu {
            hierarchies.push(Hierarchy { root, role: Role::V1Cpu });
        }
        if let Some(root) = v1_cpuset {
            hierarchies.push(Hierarchy { root, role: Role::V1Cpuset });
        }
        if let Some(root) = &v2 {
            if root.join("cgroup.pressure").exists() || root.join("cpu.pressure").exists() {
                hierarchies.push(Hierarchy { root: root.clone(), role: Role::PsiOnly });
            }
        }
    }
    (hierarchies, v2_controllers)
}

fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release.trim().split(['.', '-']).map(|p| p.parse::<u32>().unwrap_or(0));
    let (a, b) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

impl fmt::Display for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let yn = |b: bool| if b { "yes" } else { "NO" };
        writeln!(f, "online CPUs: {:?}", self.online_cpus)?;
        for h in &self.hierarchies {
            writeln!(f, "cgroup hierarchy: {:?} at {}", h.role, h.root.display())?;
        }
        if self.hierarchies.is_empty() {
            writeln!(f, "cgroup hierarchy: NONE usable (no cpu controller mounted)")?;
        }
        writeln!(f, "cpuset fence: {}", yn(self.cpuset))?;
        writeln!(f, "cpu weights: {}", yn(self.cpu_weight))?;
        writeln!(f, "cgroup cpu.idle: {}", yn(self.cpu_idle))?;
        writeln!(f, "SCHED_IDLE: {}", yn(self.sched_idle))?;
        writeln!(f, "RT group budget (cpu.rt_runtime_us): {}", yn(self.rt_group))?;
        writeln!(f, "PSI per cgroup: {}, node PSI: {}", yn(self.psi_per_cgroup), yn(self.psi_node))?;
        writeln!(f, "root: {}", yn(self.root))?;
        write!(f, "sched_ext: {} (not used)", yn(self.sched_ext))
    }
}
