//! Pods as the kubelet lays them out in a cgroup hierarchy: QoS class, pod UID and container
//! cgroups, for both cgroup drivers (cgroupfs and systemd) and both cgroup versions.
//!
//! The kubelet owns this tree: it creates a cgroup per pod under its QoS class's cgroup and
//! one per container below that, and the container runtime puts the processes there. Tiers
//! that select pods (`[tier.pods]`) therefore change these cgroups' settings in place
//! (journaled, restored like every other write) and never move a process: moving one would
//! pull it out of the hierarchy the kubelet accounts, limits and evicts by.
//!
//! Layouts (the hierarchy's root, then the kubelet's `--cgroup-root`, default `/`):
//! - cgroupfs: `kubepods/pod<uid>/<container>` (Guaranteed),
//!   `kubepods/burstable/pod<uid>/<container>`, `kubepods/besteffort/pod<uid>/<container>`;
//! - systemd: `kubepods.slice/kubepods-pod<uid_>.slice/<runtime>-<id>.scope` (Guaranteed),
//!   `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/...`, and the
//!   same for besteffort; the UID's dashes become underscores in systemd unit names.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The kubelet's QoS class of a pod (the directory it sits in).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

/// One pod's cgroup in one hierarchy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodCgroup {
    pub qos: Qos,
    /// The pod UID as the API shows it (with dashes).
    pub uid: String,
    /// The pod's cgroup directory.
    pub dir: PathBuf,
    /// Its container cgroups (the pod's child directories).
    pub containers: Vec<PathBuf>,
}

/// Which pods a tier selects (`[tier.pods]`): every listed criterion must hold; an empty
/// list (or no `tier_label`) does not restrict. `container` patterns make the tier act on the
/// matching container cgroups instead of the whole pod's.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodSelector {
    /// QoS classes: "guaranteed", "burstable", "besteffort".
    #[serde(default)]
    pub qos: Vec<Qos>,
    /// Pod UIDs (`kubectl get pod -o jsonpath='{.metadata.uid}'`).
    #[serde(default)]
    pub uid: Vec<String>,
    /// Glob patterns (`*` any run of characters) on a container cgroup's path relative to
    /// the hierarchy root, e.g. "*/cri-containerd-*.scope" or "*/pod*/*".
    #[serde(default)]
    pub container: Vec<String>,
    /// The pod's tier label, as its processes see it: a pod (or, with `container`, a
    /// container) cgroup is selected while it holds a process whose environment carries
    /// `TAILOR_TIER=<tier_label>`. Kubernetes puts it there from a pod label through the
    /// downward API (docs/kubernetes.md); the node shows it without asking the API server.
    #[serde(default)]
    pub tier_label: Option<String>,
}

impl PodSelector {
    /// The cgroup directories this selector names in `pods`: pod dirs, or container dirs
    /// matching a `container` pattern (paths relative to `root` for the patterns).
    /// `label_of(pid)` gives a process's `TAILOR_TIER`; it is asked only with a `tier_label`.
    pub fn targets(
        &self,
        root: &Path,
        pods: &[PodCgroup],
        label_of: &mut dyn FnMut(u32) -> Option<String>,
    ) -> Vec<PathBuf> {
        let mut labelled = |dir: &Path| match &self.tier_label {
            None => true,
            Some(want) => procs_below(dir).into_iter().any(|pid| label_of(pid).as_deref() == Some(want.as_str())),
        };
        let mut out = Vec::new();
        for pod in pods {
            let qos_ok = self.qos.is_empty() || self.qos.contains(&pod.qos);
            let uid_ok = self.uid.is_empty() || self.uid.iter().any(|u| u == &pod.uid);
            if !(qos_ok && uid_ok) {
                continue;
            }
            if self.container.is_empty() {
                if labelled(&pod.dir) {
                    out.push(pod.dir.clone());
                }
                continue;
            }
            for c in &pod.containers {
                let rel = format!("/{}", c.strip_prefix(root).unwrap_or(c).display());
                if self.container.iter().any(|p| glob_match(p, &rel)) && labelled(c) {
                    out.push(c.clone());
                }
            }
        }
        out
    }
}

/// Whether `value` can be a Kubernetes label value that names a tier: 1 to 63 characters,
/// letters, digits, `-`, `_` or `.`, beginning and ending with a letter or digit. (The API
/// allows an empty value too, but an empty `TAILOR_TIER` names no tier.)
pub fn check_label_value(value: &str) -> Result<(), LabelValueError> {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if value.is_empty() {
        return Err(LabelValueError::Empty);
    }
    if value.len() > 63 {
        return Err(LabelValueError::TooLong { len: value.len() });
    }
    if !value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        return Err(LabelValueError::BadCharacter);
    }
    if !alnum(value.chars().next()) || !alnum(value.chars().last()) {
        return Err(LabelValueError::BadEnds);
    }
    Ok(())
}

/// Why a string cannot be a Kubernetes label value naming a tier (the caller names the
/// field; each message reads after it).
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum LabelValueError {
    #[error("is empty")]
    Empty,
    #[error("is {len} characters; a label value has at most 63")]
    TooLong { len: usize },
    #[error("may hold only letters, digits, '-', '_' and '.' (a Kubernetes label value)")]
    BadCharacter,
    #[error("must begin and end with a letter or digit (a Kubernetes label value)")]
    BadEnds,
}

/// Whether `text` matches `pattern`, where `*` matches any run of characters (also `/`).
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || !text[first.len()..].ends_with(last) || text.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()).filter(|e| e.path().is_dir()).map(|e| e.path()).collect())
        .unwrap_or_default();
    dirs.sort();
    dirs
}

fn name_of(p: &Path) -> &str {
    p.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

/// The pod UID a pod directory's name carries, with dashes, or `None` if it is no pod dir.
/// cgroupfs: `pod<uid>`; systemd: `kubepods[-<qos>]-pod<uid_>.slice`.
fn pod_uid(name: &str) -> Option<String> {
    if let Some(stem) = name.strip_suffix(".slice") {
        let (_, uid) = stem.rsplit_once("-pod")?;
        return Some(uid.replace('_', "-"));
    }
    name.strip_prefix("pod").filter(|u| !u.is_empty()).map(str::to_string)
}

/// Every pod cgroup under `base` (the hierarchy root joined with the kubelet's cgroup root),
/// whichever driver made it. Empty if there is no kubelet tree there.
pub fn discover(base: &Path) -> Vec<PodCgroup> {
    let mut pods = Vec::new();
    let mut scan = |qos: Qos, dir: &Path| {
        for d in subdirs(dir) {
            if let Some(uid) = pod_uid(name_of(&d)) {
                pods.push(PodCgroup { qos, uid, containers: subdirs(&d), dir: d });
            }
        }
    };
    let cgroupfs = base.join("kubepods");
    if cgroupfs.is_dir() {
        scan(Qos::Guaranteed, &cgroupfs);
        scan(Qos::Burstable, &cgroupfs.join("burstable"));
        scan(Qos::BestEffort, &cgroupfs.join("besteffort"));
    }
    let systemd = base.join("kubepods.slice");
    if systemd.is_dir() {
        scan(Qos::Guaranteed, &systemd);
        scan(Qos::Burstable, &systemd.join("kubepods-burstable.slice"));
        scan(Qos::BestEffort, &systemd.join("kubepods-besteffort.slice"));
    }
    pods
}

/// The processes in cgroup `dir` and every cgroup below it.
pub fn procs_below(dir: &Path) -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    for sub in subdirs(dir) {
        pids.extend(procs_below(&sub));
    }
    pids
}

/// Whether a cgroup path (as in `/proc/PID/cgroup`, relative to the hierarchy root) lies in
/// a kubelet-owned tree: such a process is never moved.
pub fn is_kubelet_owned(cgroup_path: &str) -> bool {
    cgroup_path.split('/').any(|part| part == "kubepods" || part == "kubepods.slice")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_dir_names_of_both_drivers() {
        assert_eq!(pod_uid("pod1234-ab").as_deref(), Some("1234-ab"));
        assert_eq!(pod_uid("kubepods-burstable-pod12_34_ab.slice").as_deref(), Some("12-34-ab"));
        assert_eq!(pod_uid("kubepods-pod9_9.slice").as_deref(), Some("9-9"));
        assert_eq!(pod_uid("kubepods-burstable.slice"), None, "a QoS dir is no pod");
        assert_eq!(pod_uid("burstable"), None);
        assert_eq!(pod_uid("pod"), None);
    }

    #[test]
    fn globs() {
        assert!(glob_match("*/cri-containerd-*.scope", "/kubepods.slice/x/cri-containerd-abc.scope"));
        assert!(!glob_match("*/cri-containerd-*.scope", "/kubepods.slice/x/crio-abc.scope"));
        assert!(glob_match("/kubepods/besteffort/*", "/kubepods/besteffort/podx/c1"));
        assert!(glob_match("exact", "exact") && !glob_match("exact", "exactly"));
        assert!(!glob_match("a*a", "a"), "the two ends may not overlap");
    }

    #[test]
    fn a_tier_label_selects_pods_and_containers_holding_a_labelled_process() {
        let root = std::env::temp_dir().join(format!("tailor-kubepods-label-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let container = |rel: &str, pids: &str| {
            let dir = root.join(rel);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("cgroup.procs"), pids).unwrap();
        };
        container("kubepods/burstable/podshop/app", "10\n");
        container("kubepods/burstable/podshop/sidecar", "11\n");
        container("kubepods/burstable/podplain/app", "20\n");
        container("kubepods/podlied/app", "30\n");
        let pods = discover(&root);
        let labels = |pid: u32| match pid {
            10 => Some("critical".to_string()),
            30 => Some("critical-ish".to_string()),
            _ => None,
        };
        let rel = |dirs: Vec<PathBuf>| -> Vec<String> {
            dirs.iter().map(|d| d.strip_prefix(&root).unwrap().display().to_string()).collect()
        };
        let asked = std::cell::Cell::new(0);
        let mut label_of = |pid| {
            asked.set(asked.get() + 1);
            labels(pid)
        };
        let by_label = PodSelector { tier_label: Some("critical".into()), ..Default::default() };
        assert_eq!(rel(by_label.targets(&root, &pods, &mut label_of)), ["kubepods/burstable/podshop"]);
        let app_only = PodSelector { container: vec!["*/app".into()], ..by_label.clone() };
        assert_eq!(rel(app_only.targets(&root, &pods, &mut label_of)), ["kubepods/burstable/podshop/app"]);
        let sidecar = PodSelector { container: vec!["*/sidecar".into()], ..by_label.clone() };
        assert!(sidecar.targets(&root, &pods, &mut label_of).is_empty(), "the sidecar carries no label");
        let guaranteed = PodSelector { qos: vec![Qos::Guaranteed], ..by_label.clone() };
        assert!(guaranteed.targets(&root, &pods, &mut label_of).is_empty(), "every criterion must hold");
        asked.set(0);
        let all = PodSelector::default().targets(&root, &pods, &mut label_of);
        assert_eq!(all.len(), 3);
        assert_eq!(asked.get(), 0, "no label read without a tier_label");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn label_values() {
        assert!(check_label_value("critical").is_ok() && check_label_value("a.b_c-9").is_ok());
        assert_eq!(check_label_value(""), Err(LabelValueError::Empty));
        assert!(check_label_value("").unwrap_err().to_string().contains("empty"));
        assert_eq!(check_label_value("a b"), Err(LabelValueError::BadCharacter));
        assert_eq!(check_label_value("a/b"), Err(LabelValueError::BadCharacter));
        assert_eq!(check_label_value("-a"), Err(LabelValueError::BadEnds));
        assert_eq!(check_label_value("a."), Err(LabelValueError::BadEnds));
        assert_eq!(check_label_value(&"x".repeat(64)), Err(LabelValueError::TooLong { len: 64 }));
        assert!(check_label_value(&"x".repeat(64)).unwrap_err().to_string().contains("63"));
    }

    #[test]
    fn kubelet_owned_paths() {
        assert!(is_kubelet_owned("/kubepods/burstable/podx/c"));
        assert!(is_kubelet_owned("/kubepods.slice/kubepods-besteffort.slice"));
        assert!(!is_kubelet_owned("/system.slice/kubepods-not.service"));
    }
}
