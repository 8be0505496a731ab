//! What to inspect: one process, every process of a service, a cgroup, or the whole node —
//! resolved to its processes, threads and the CPUs they may run on.

use serde::Serialize;

use crate::cpulist::{format_list, parse_list, CpuSet};
use crate::root::{numeric_entries, SysRoot};
use crate::task::{allowed_cpus, parse_stat};

/// What the user asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetSpec {
    Node,
    Pid(u32),
    /// Processes whose name or executable is NAME, or whose cgroup is `NAME.service`.
    Service(String),
    /// A cgroup path relative to the cgroup mount, e.g. `/system.slice/nginx.service`.
    Cgroup(String),
}

/// A resolved target.
#[derive(Clone, Debug, Serialize)]
pub struct Target {
    /// `pid 123 (nginx)`, `service nginx`, `cgroup /x`, `node`.
    pub label: String,
    /// Empty for the whole node.
    pub pids: Vec<u32>,
    /// (pid, tid) of every thread.
    #[serde(skip)]
    pub threads: Vec<(u32, u32)>,
    pub thread_count: usize,
    /// The CPUs its threads may run on (every online CPU for the node).
    #[serde(serialize_with = "serialize_cpus")]
    pub cpus: CpuSet,
    /// The cgroup whose `cpu.pressure` applies, when there is one.
    pub cgroup: Option<String>,
}

fn serialize_cpus<S: serde::Serializer>(cpus: &CpuSet, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_list(cpus))
}

impl Target {
    pub fn is_node(&self) -> bool {
        self.pids.is_empty()
    }
}

/// Resolving a target failed.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("no process {0} (is it running? `ps -p {0}`)")]
    NoSuchPid(u32),
    #[error("no process named {0:?} and no cgroup {0}.service (check `pgrep -l {0}`)")]
    NoSuchService(String),
    #[error("cgroup {path}: cannot read {file} ({kind:?}); give a path under the cgroup mount, e.g. /system.slice/nginx.service")]
    Cgroup { path: String, file: String, kind: std::io::ErrorKind },
    #[error("cgroup {0} has no processes")]
    EmptyCgroup(String),
}

/// The CPUs that are online (`sys/devices/system/cpu/online`).
pub fn online_cpus(root: &SysRoot) -> CpuSet {
    root.read("sys/devices/system/cpu/online").ok().and_then(|s| parse_list(&s)).unwrap_or_default()
}

/// Where the cgroup v2 hierarchy is mounted under the root: `sys/fs/cgroup/unified` on hybrid
/// systems, `sys/fs/cgroup` on unified ones.
pub fn cgroup2_mount(root: &SysRoot) -> Option<&'static str> {
    ["sys/fs/cgroup/unified", "sys/fs/cgroup"].into_iter().find(|m| root.exists(&format!("{m}/cgroup.procs")))
}

/// A process's cgroup v2 path (the `0::` line of `/proc/PID/cgroup`).
pub fn cgroup_of(root: &SysRoot, pid: u32) -> Option<String> {
    let text = root.read(&format!("proc/{pid}/cgroup")).ok()?;
    text.lines().find_map(|l| l.strip_prefix("0::")).map(str::to_string)
}

fn comm_of(root: &SysRoot, pid: u32) -> Option<String> {
    root.read(&format!("proc/{pid}/stat")).ok().and_then(|s| parse_stat(&s)).map(|s| s.comm)
}

/// Resolves `spec` under `root`.
pub fn resolve(root: &SysRoot, spec: &TargetSpec) -> Result<Target, TargetError> {
    let (label, pids, cgroup) = match spec {
        TargetSpec::Node => ("node".to_string(), Vec::new(), None),
        TargetSpec::Pid(pid) => {
            let comm = comm_of(root, *pid).ok_or(TargetError::NoSuchPid(*pid))?;
            (format!("pid {pid} ({comm})"), vec![*pid], cgroup_of(root, *pid))
        }
        TargetSpec::Service(name) => {
            let unit = format!("/{name}.service");
            let pids: Vec<u32> = numeric_entries(root, "proc")
                .into_iter()
                .filter(|&pid| {
                    // comm is cut to 15 bytes: a longer NAME matches its first 15.
                    let comm_matches =
                        comm_of(root, pid).is_some_and(|c| &c == name || (c.len() == 15 && name.starts_with(&c)));
                    let exe_matches = root
                        .link(&format!("proc/{pid}/exe"))
                        .is_ok_and(|e| e.rsplit('/').next() == Some(name.as_str()));
                    let unit_matches = cgroup_of(root, pid).is_some_and(|c| c.ends_with(&unit));
                    comm_matches || exe_matches || unit_matches
                })
                .collect();
            if pids.is_empty() {
                return Err(TargetError::NoSuchService(name.clone()));
            }
            let cgroup = cgroup_of(root, pids[0]).filter(|c| c.ends_with(&unit));
            (format!("service {name}"), pids, cgroup)
        }
        TargetSpec::Cgroup(path) => {
            let mount = cgroup2_mount(root).unwrap_or("sys/fs/cgroup");
            let file = format!("{mount}/{}/cgroup.procs", path.trim_matches('/'));
            let text = root.read(&file).map_err(|kind| TargetError::Cgroup {
                path: path.clone(),
                file: file.clone(),
                kind,
            })?;
            let pids: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
            if pids.is_empty() {
                return Err(TargetError::EmptyCgroup(path.clone()));
            }
            (format!("cgroup {path}"), pids, Some(path.clone()))
        }
    };
    let mut threads = Vec::new();
    let mut cpus = CpuSet::new();
    for &pid in &pids {
        for tid in numeric_entries(root, &format!("proc/{pid}/task")) {
            threads.push((pid, tid));
            cpus.extend(allowed_cpus(root, pid, tid).unwrap_or_default());
        }
    }
    if cpus.is_empty() {
        cpus = online_cpus(root);
    }
    Ok(Target { label, thread_count: threads.len(), pids, threads, cpus, cgroup })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy() -> SysRoot {
        SysRoot::at(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/healthy/t1"))
    }

    #[test]
    fn pid_service_and_cgroup_resolve_to_the_same_process() {
        let root = healthy();
        let by_pid = resolve(&root, &TargetSpec::Pid(100)).unwrap();
        assert_eq!((by_pid.label.as_str(), by_pid.thread_count), ("pid 100 (server)", 1));
        assert_eq!(format_list(&by_pid.cpus), "0");
        assert_eq!(by_pid.cgroup.as_deref(), Some("/system.slice/server.service"));
        let by_name = resolve(&root, &TargetSpec::Service("server".into())).unwrap();
        assert_eq!(by_name.pids, vec![100]);
        let by_cgroup = resolve(&root, &TargetSpec::Cgroup("/system.slice/server.service".into())).unwrap();
        assert_eq!(by_cgroup.pids, vec![100]);
        let node = resolve(&root, &TargetSpec::Node).unwrap();
        assert!(node.is_node() && format_list(&node.cpus) == "0-1");
    }

    #[test]
    fn unknown_targets_are_clear_errors() {
        let root = healthy();
        assert!(resolve(&root, &TargetSpec::Pid(9)).unwrap_err().to_string().contains("no process 9"));
        assert!(resolve(&root, &TargetSpec::Service("nope".into())).unwrap_err().to_string().contains("pgrep"));
        let e = resolve(&root, &TargetSpec::Cgroup("/x".into())).unwrap_err().to_string();
        assert!(e.contains("cgroup /x") && e.contains("cgroup.procs"), "{e}");
    }

    #[test]
    fn the_service_cgroup_pressure_is_preferred_to_the_node() {
        let (p, file) = crate::checks::pressure::read(&healthy(), Some("/system.slice/server.service")).unwrap();
        assert_eq!(p.some_avg10, 0.42);
        assert!(file.ends_with("server.service/cpu.pressure"));
        let (node, _) = crate::checks::pressure::read(&healthy(), None).unwrap();
        assert_eq!(node.some_avg10, 0.10);
    }

    #[test]
    fn a_kernel_without_psi_names_every_file_tried() {
        // A scratch root: a cgroup2 mount without the service's cgroup, and a node file
        // without the `some` line.
        let dir = std::env::temp_dir().join(format!("tailor-doctor-no-psi-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sys/fs/cgroup")).unwrap();
        std::fs::create_dir_all(dir.join("proc/pressure")).unwrap();
        std::fs::write(dir.join("sys/fs/cgroup/cgroup.procs"), "1\n").unwrap();
        std::fs::write(dir.join("proc/pressure/cpu"), "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").unwrap();
        let e = crate::checks::pressure::read(&SysRoot::at(dir.clone()), Some("/system.slice/x.service")).unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        let crate::checks::pressure::PressureError::NotExposed { tried } = &e;
        assert_eq!(tried, &["/sys/fs/cgroup/system.slice/x.service/cpu.pressure", "/proc/pressure/cpu"]);
        assert!(e.to_string().starts_with("PSI not exposed (kernel without CONFIG_PSI or psi=0)"), "{e}");
    }
}
