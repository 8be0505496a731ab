//! The agent's TOML config: tiers, how processes are matched into them, and what each enforces.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::NodeError;

/// What a tier is for; it picks the defaults and the checks (sizing rule, best-effort minimum).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TierKind {
    /// Latency-sensitive work; the GAT domain lives here.
    Critical,
    /// Ordinary services.
    Normal,
    /// Work that may only use CPU nobody else wants.
    BestEffort,
}

/// The whole file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Directory for the undo journal, the pid file and the window log.
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    /// Name of the parent cgroup the agent creates in each hierarchy (tiers are its children).
    #[serde(default = "default_cgroup_name")]
    pub cgroup_name: String,
    /// Period of the reconcile loop.
    #[serde(default = "default_reconcile_ms")]
    pub reconcile_interval_ms: u64,
    /// The supervisor restores and restarts the agent when no heartbeat arrives for this long.
    #[serde(default = "default_heartbeat_timeout_ms")]
    pub heartbeat_timeout_ms: u64,
    /// Length of an attribution window written to `<state_dir>/windows.jsonl` (0 = none).
    #[serde(default = "default_window_ms")]
    pub window_ms: u64,
    /// Tiers, in match order: a process goes to the first tier that matches it.
    #[serde(rename = "tier", default)]
    pub tiers: Vec<TierConfig>,
    /// Host the runtime's node-wide kernel-enforced scheduler for this tier.
    #[serde(default)]
    pub gat_domain: Option<GatDomainConfig>,
    /// Where the agent serves Prometheus `/metrics`, `/healthz` and `/readyz`
    /// (e.g. "127.0.0.1:9464"); none when omitted. docs/observability.md lists the metrics.
    #[serde(default)]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The kubelet's `--cgroup-root` inside each hierarchy: where `kubepods` (cgroupfs
    /// driver) or `kubepods.slice` (systemd driver) lives. Tiers with `[tier.pods]` look there.
    #[serde(default = "default_kubelet_cgroup_root")]
    pub kubelet_cgroup_root: String,
}

fn default_kubelet_cgroup_root() -> String {
    "/".into()
}

/// One tier.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierConfig {
    /// Name: the cgroup's name and the value of `TAILOR_TIER` that selects this tier.
    pub name: String,
    /// critical, normal or best-effort.
    pub kind: TierKind,
    /// Declared CPU demand of the tier, in CPUs, for the sizing rule (critical: ≤ CPUs − 1).
    #[serde(default)]
    pub demand_cpus: Option<f64>,
    /// cpuset fence, kernel list syntax ("1", "2-5,7"). None: all CPUs.
    #[serde(default)]
    pub cpus: Option<String>,
    /// CPU weight on the cgroup v2 scale 1..=10000 (v1 shares = weight × 1024 / 100).
    /// Default: critical 10000, normal 100, best-effort none (it uses `idle`).
    #[serde(default)]
    pub cpu_weight: Option<u64>,
    /// cgroup `cpu.idle`: the group only gets CPU no one else wants. Default: best-effort yes.
    #[serde(default)]
    pub idle: Option<bool>,
    /// SCHED_IDLE on every thread (fallback when `cpu.idle` is missing). Default: best-effort
    /// yes only when the kernel has no `cpu.idle`.
    #[serde(default)]
    pub sched_idle: Option<bool>,
    /// cgroup v1 RT_GROUP_SCHED budget per second for SCHED_FIFO/RR threads in this tier
    /// (the GAT domain's band). Default: critical 500000 where RT group scheduling exists, else 0.
    #[serde(default)]
    pub rt_runtime_us: Option<u64>,
    /// SCHED_RR at this priority (1..=99) for every thread of the tier: a kernel-enforced band
    /// that preempts CFS work at once instead of at the next tick. Needs `rt_runtime_us` > 0,
    /// which caps the band so it can never starve the node. Threads already SCHED_FIFO/RR (the
    /// runtime's own GAT band) are left as they are. Default: none.
    #[serde(default)]
    pub rt_priority: Option<i32>,
    /// How processes are selected.
    #[serde(default, rename = "match")]
    pub matcher: MatchConfig,
    /// Kubernetes pods, by the kubelet's cgroups (QoS class, pod UID, container path): the
    /// tier's settings go to those cgroups in place and no process is moved (`kubepods`).
    #[serde(default)]
    pub pods: Option<crate::kubepods::PodSelector>,
}

impl TierConfig {
    /// Whether this tier selects pods (settings in place in the kubelet's cgroups).
    pub fn is_pod_tier(&self) -> bool {
        self.pods.is_some()
    }
}

/// Selectors; a process matches if any one matches. `TAILOR_TIER=<tier name>` in a process's
/// environment always selects the tier.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchConfig {
    /// Process names (`/proc/PID/comm`, 15 characters at most).
    #[serde(default)]
    pub comm: Vec<String>,
    /// Executable basenames (`/proc/PID/exe`).
    #[serde(default)]
    pub exe: Vec<String>,
    /// cgroup path prefixes (as in `/proc/PID/cgroup`, e.g. "/system.slice/nginx.service").
    #[serde(default)]
    pub cgroup: Vec<String>,
    /// PIDs.
    #[serde(default)]
    pub pid: Vec<u32>,
}

/// The runtime's node-wide kernel-enforced scheduler, hosted by the node agent
/// (`tailor_runtime::kernel::run_agent` on a thread of the agent process). Services on
/// the node register their request threads in `table` (their runtime config:
/// `{"kind":"kernel","table":"<table>"}`); one `policy` orders them all by GAT.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatDomainConfig {
    /// The critical tier whose processes form the GAT domain. The node agent places
    /// them but leaves their threads' scheduling policies to the runtime's scheduler.
    pub tier: String,
    /// The shared-memory registration table.
    #[serde(default = "default_gat_table")]
    pub table: PathBuf,
    /// The node-wide policy (default `orf`, c = 6, 500 µs slice: docs/runtime.md).
    #[serde(default = "default_gat_policy")]
    pub policy: tailor_core::PolicySpec,
    /// CPUs the policy schedules (default: every CPU this agent may use).
    #[serde(default)]
    pub cpus: Option<usize>,
    /// How the policy reaches the kernel: `band` (default; the agent moves jobs in and out
    /// of a SCHED_FIFO band) or `priority` (key ordering: each job takes a SCHED_FIFO level
    /// from its GAT or deadline; orf with c = CPUs, gfifo, edf). docs/runtime.md.
    #[serde(default)]
    pub enforce: GatEnforce,
    /// `enforce = "priority"`: µs of key per SCHED_FIFO level.
    #[serde(default = "default_bucket_us")]
    pub bucket_us: f64,
}

/// `[gat_domain] enforce`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GatEnforce {
    #[default]
    Band,
    Priority,
}

impl GatDomainConfig {
    /// The runtime agent's enforcement this section asks for.
    /// (Validated when the config loads: `bucket_us` is a width `Enforce::priority_us` takes.)
    pub fn enforce(&self) -> tailor_runtime::kernel::Enforce {
        use tailor_runtime::kernel::Enforce;
        match self.enforce {
            GatEnforce::Band => Enforce::Band,
            GatEnforce::Priority => {
                Enforce::priority_us(self.bucket_us).expect("bucket_us is validated when the config loads")
            }
        }
    }
}

fn default_bucket_us() -> f64 {
    1000.0
}

fn default_gat_table() -> PathBuf {
    PathBuf::from("/dev/shm/tailor-sched")
}
fn default_gat_policy() -> tailor_core::PolicySpec {
    tailor_core::PolicySpec::Orf { c: 6, slice_us: 500.0 }
}

fn default_state_dir() -> PathBuf {
    PathBuf::from("/run/tailor-node")
}
fn default_cgroup_name() -> String {
    "tailor".into()
}
fn default_reconcile_ms() -> u64 {
    200
}
fn default_heartbeat_timeout_ms() -> u64 {
    1000
}
fn default_window_ms() -> u64 {
    10_000
}

impl NodeConfig {
    /// Reads and validates a config file; errors name the file, the line and the valid keys.
    pub fn load(path: &Path) -> Result<NodeConfig, NodeError> {
        let text = std::fs::read_to_string(path).map_err(|e| NodeError::io(path, e))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses config text; `origin` names the file in errors.
    pub fn parse(text: &str, origin: &str) -> Result<NodeConfig, NodeError> {
        let config: NodeConfig = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            let at = line.map(|l| format!(":{l}")).unwrap_or_default();
            NodeError::Config(format!("{origin}{at}: {}", e.message()))
        })?;
        let errors = config.validate();
        if !errors.is_empty() {
            return Err(NodeError::Config(format!("{origin}: {}", errors.join("; "))));
        }
        Ok(config)
    }

    /// Every problem at once (linkerd style), not just the first.
    fn validate(&self) -> Vec<String> {
        let mut errors = Vec::new();
        if self.tiers.is_empty() {
            errors.push("no [[tier]] declared; add at least one (see `tailor node example`)".into());
        }
        if self.cgroup_name.is_empty() || self.cgroup_name.contains('/') || self.cgroup_name.starts_with('.') {
            errors.push(format!("cgroup_name {:?} must be one plain directory name", self.cgroup_name));
        }
        if !self.kubelet_cgroup_root.starts_with('/') || self.kubelet_cgroup_root.contains("..") {
            errors.push(format!(
                "kubelet_cgroup_root {:?}: give the kubelet's --cgroup-root, an absolute path like \"/\"",
                self.kubelet_cgroup_root
            ));
        }
        if self.reconcile_interval_ms == 0 {
            errors.push("reconcile_interval_ms must be > 0".into());
        }
        for (i, tier) in self.tiers.iter().enumerate() {
            let ok_name =
                !tier.name.is_empty() && tier.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !ok_name {
                errors.push(format!("tier[{i}].name {:?}: use letters, digits, '-' or '_'", tier.name));
            }
            if self.tiers[..i].iter().any(|t| t.name == tier.name) {
                errors.push(format!("tier[{i}].name {:?} is declared twice", tier.name));
            }
            if let Some(cpus) = &tier.cpus {
                match parse_cpu_list(cpus) {
                    Ok(list) if list.is_empty() => errors.push(format!(
                        "tier {:?}: cpus {:?} is empty; a tier must keep at least one CPU",
                        tier.name, cpus
                    )),
                    Ok(_) => {}
                    Err(e) => errors.push(format!("tier {:?}: cpus: {e}", tier.name)),
                }
            }
            if tier.is_pod_tier() {
                if tier.cpus.is_some() {
                    errors.push(format!(
                        "tier {:?}: `cpus` with [tier.pods]: the kubelet owns pod cpusets (its CPU manager rewrites \
                         them). Fix: remove `cpus`; for exclusive CPUs give the pods integer CPU requests under the \
                         kubelet's `cpuManagerPolicy: static`",
                        tier.name
                    ));
                }
                if tier.rt_runtime_us.is_some_and(|rt| rt > 0) {
                    errors.push(format!(
                        "tier {:?}: `rt_runtime_us` with [tier.pods]: the kubelet's pod cgroups have no RT budget \
                         to give. Fix: remove `rt_runtime_us` (pod tiers are tuned by weight or idle in place)",
                        tier.name
                    ));
                }
                if let Some(label) = tier.pods.as_ref().and_then(|p| p.tier_label.as_deref()) {
                    if let Err(why) = crate::kubepods::check_label_value(label) {
                        errors.push(format!(
                            "tier {:?}: [tier.pods] tier_label {label:?}: {why}. Fix: the value of the pod label \
                             the downward API passes as TAILOR_TIER, e.g. tier_label = \"critical\"",
                            tier.name
                        ));
                    }
                }
                let m = &tier.matcher;
                if !(m.comm.is_empty() && m.exe.is_empty() && m.cgroup.is_empty() && m.pid.is_empty()) {
                    errors.push(format!(
                        "tier {:?}: [tier.match] with [tier.pods]: matched processes would be moved into the \
                         agent's cgroups, out of the kubelet's. Fix: select pods only (qos, uid, container, \
                         tier_label)",
                        tier.name
                    ));
                }
            }
            if let Some(w) = tier.cpu_weight {
                if !(1..=10_000).contains(&w) {
                    errors.push(format!("tier {:?}: cpu_weight {w} must be in 1..=10000", tier.name));
                }
            }
            if let Some(d) = tier.demand_cpus {
                if !(d.is_finite() && d > 0.0) {
                    errors.push(format!("tier {:?}: demand_cpus must be a positive number", tier.name));
                }
            }
            if let Some(p) = tier.rt_priority {
                if !(1..=99).contains(&p) {
                    errors.push(format!("tier {:?}: rt_priority {p} must be in 1..=99", tier.name));
                }
                if tier.rt_runtime_us == Some(0) {
                    errors.push(format!(
                        "tier {:?}: rt_priority needs an RT budget; set rt_runtime_us > 0 (e.g. 500000)",
                        tier.name
                    ));
                }
            }
            if let Some(rt) = tier.rt_runtime_us {
                if rt >= 1_000_000 {
                    errors.push(format!("tier {:?}: rt_runtime_us {rt} must be below the 1 s period", tier.name));
                }
            }
        }
        if let Some(g) = &self.gat_domain {
            match self.tiers.iter().find(|t| t.name == g.tier) {
                None => errors.push(format!("gat_domain.tier {:?} names no declared tier", g.tier)),
                Some(t) if t.kind != TierKind::Critical => {
                    errors.push(format!("gat_domain.tier {:?} must be a critical tier", g.tier))
                }
                Some(t) if t.rt_priority.is_some() || t.sched_idle == Some(true) => errors.push(format!(
                    "tier {:?}: remove `rt_priority`/`sched_idle`: it is the GAT domain, whose threads' policies the runtime's scheduler sets",
                    g.tier
                )),
                Some(_) => {}
            }
            if let Err(e) = g.policy.validate() {
                errors.push(format!("gat_domain.policy: {e}"));
            }
            if g.cpus == Some(0) {
                errors.push("gat_domain.cpus = 0: give at least 1 (or omit it for every CPU)".into());
            }
            if g.enforce == GatEnforce::Priority {
                let cpus = g.cpus.unwrap_or_else(tailor_runtime::available_cpus);
                if let Err(e) = tailor_runtime::kernel::Enforce::key_of(&g.policy, cpus) {
                    errors.push(format!("gat_domain.enforce = \"priority\": {e}"));
                }
                if let Err(e) = tailor_runtime::kernel::Enforce::priority_us(g.bucket_us) {
                    errors.push(format!("gat_domain.bucket_us = {e}"));
                }
            }
        }
        errors
    }

    /// Warnings about a config that works but breaks a rule from Temper.
    pub fn warnings(&self, online_cpus: usize) -> Vec<String> {
        let mut warnings = Vec::new();
        let critical: Vec<&TierConfig> = self.tiers.iter().filter(|t| t.kind == TierKind::Critical).collect();
        let demand: f64 = critical.iter().filter_map(|t| t.demand_cpus).sum();
        let budget = online_cpus.saturating_sub(1) as f64;
        // The rule is about confinement: without a cpuset fence (what `tailor node plan` writes
        // for such a node) critical work is not confined and nothing queues behind a fence.
        let fenced = critical.iter().any(|t| t.cpus.is_some());
        if fenced && demand > budget {
            warnings.push(format!(
                "sizing rule: critical demand {demand} CPUs exceeds CPUs − 1 = {budget}; the cpuset fence will queue \
                 critical work behind itself (Temper measured +156% p99 with one background process on an undersized \
                 node). Fix: remove `cpus` from the critical tier (it is then protected by its weight and RT band), \
                 or lower its demand"
            ));
        }
        for t in &critical {
            if let (Some(d), Some(cpus)) = (t.demand_cpus, &t.cpus) {
                let n = parse_cpu_list(cpus).map(|l| l.len()).unwrap_or(0) as f64;
                if d > n {
                    warnings.push(format!("tier {:?}: demand_cpus {d} exceeds its cpuset of {n} CPUs", t.name));
                }
            }
            if critical.len() == 1
                && t.cpus.as_deref().map(parse_cpu_list).and_then(|r| r.ok()).map(|l| l.len()) == Some(online_cpus)
            {
                warnings.push(format!("tier {:?}: cpuset covers every CPU, so it fences nothing", t.name));
            }
        }
        if critical.iter().any(|t| t.demand_cpus.is_none()) {
            warnings.push("a critical tier has no demand_cpus; the sizing rule cannot be checked".into());
        }
        warnings
    }
}

/// A part of a CPU list that is not a CPU number (0–4095) or an ascending range of them.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("{part:?} is not a CPU number or range like \"0-3\"")]
pub struct CpuListError {
    pub part: String,
}

/// Parses the kernel's CPU list syntax ("0-2,5").
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, CpuListError> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.trim().is_empty()) {
        let part = part.trim();
        let bad = || CpuListError { part: part.to_string() };
        if let Some((a, b)) = part.split_once('-') {
            let (a, b): (usize, usize) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
            if a > b || b > 4095 {
                return Err(bad());
            }
            cpus.extend(a..=b);
        } else {
            let c: usize = part.parse().map_err(|_| bad())?;
            if c > 4095 {
                return Err(bad());
            }
            cpus.push(c);
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// A working example config (`tailor node example`).
pub const EXAMPLE: &str = include_str!("../examples/node.toml");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_parses() {
        let c = NodeConfig::parse(EXAMPLE, "examples/node.toml").unwrap();
        assert_eq!(c.tiers.len(), 3);
    }

    #[test]
    fn unknown_key_names_file_line_and_valid_keys() {
        let text = "[[tier]]\nname = \"a\"\nkind = \"critical\"\ncpu_wieght = 5\n";
        let err = NodeConfig::parse(text, "n.toml").unwrap_err().to_string();
        assert!(err.contains("n.toml:4"), "{err}");
        assert!(err.contains("cpu_wieght") && err.contains("cpu_weight"), "{err}");
    }

    #[test]
    fn all_errors_reported_together() {
        let text = "[[tier]]\nname = \"a b\"\nkind = \"normal\"\ncpus = \"x\"\ncpu_weight = 0\n";
        let err = NodeConfig::parse(text, "n.toml").unwrap_err().to_string();
        assert!(err.contains("name") && err.contains("cpus") && err.contains("cpu_weight"), "{err}");
    }

    #[test]
    fn gat_domain_key_ordering_needs_a_policy_with_one_key() {
        let base = "[[tier]]\nname = \"c\"\nkind = \"critical\"\n\n[gat_domain]\ntier = \"c\"\ncpus = 2\nenforce = \"priority\"\n";
        let err = NodeConfig::parse(base, "n.toml").unwrap_err().to_string();
        assert!(err.contains("gat_domain.enforce") && err.contains("--c 2"), "default orf c = 6 on 2 CPUs: {err}");
        let ok = format!("{base}policy = {{ kind = \"orf\", c = 2 }}\nbucket_us = 2000\n");
        let c = NodeConfig::parse(&ok, "n.toml").unwrap();
        let g = c.gat_domain.unwrap();
        assert_eq!(g.enforce(), tailor_runtime::kernel::Enforce::Priority { bucket_ns: 2_000_000 });
        let err = NodeConfig::parse(&format!("{base}policy = {{ kind = \"edf\" }}\nbucket_us = 0\n"), "n.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("gat_domain.bucket_us = 0"), "{err}");
        let err = NodeConfig::parse(&base.replace("priority", "prio"), "n.toml").unwrap_err().to_string();
        assert!(err.contains("prio") && err.contains("band") && err.contains("priority"), "{err}");
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-2,5").unwrap(), vec![0, 1, 2, 5]);
        assert_eq!(parse_cpu_list("1\n").unwrap(), vec![1]);
        assert_eq!(parse_cpu_list("3-1"), Err(CpuListError { part: "3-1".into() }));
        assert_eq!(parse_cpu_list("0, a"), Err(CpuListError { part: "a".into() }));
        assert_eq!(parse_cpu_list("0-5000"), Err(CpuListError { part: "0-5000".into() }));
    }

    #[test]
    fn sizing_rule_warns() {
        let text = "[[tier]]\nname = \"c\"\nkind = \"critical\"\ndemand_cpus = 2.0\ncpus = \"0-1\"\n";
        let c = NodeConfig::parse(text, "n.toml").unwrap();
        assert!(c.warnings(2).iter().any(|w| w.contains("sizing rule")));
        assert!(!c.warnings(4).iter().any(|w| w.contains("sizing rule")));
        // The same demand without a fence: nothing is confined, nothing to warn about.
        let unfenced = "[[tier]]\nname = \"c\"\nkind = \"critical\"\ndemand_cpus = 2.0\n";
        let c = NodeConfig::parse(unfenced, "n.toml").unwrap();
        assert!(!c.warnings(2).iter().any(|w| w.contains("sizing rule")), "{:?}", c.warnings(2));
    }
}
