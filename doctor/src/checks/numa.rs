//! NUMA effects: whether the service's CPUs span NUMA nodes and where its memory is
//! (`/sys/devices/system/node/nodeN/cpulist`, `/proc/PID/numa_maps`).

use std::collections::BTreeMap;

use crate::checks::Context;
use crate::cpulist::{format_list, parse_list};
use crate::finding::{node_cannot, Finding, Severity, Source};

/// Pages per NUMA node summed over a `numa_maps` file (`N0=12 N1=3` fields).
pub fn pages_by_node(numa_maps: &str) -> BTreeMap<u32, u64> {
    let mut out = BTreeMap::new();
    for field in numa_maps.split_whitespace() {
        if let Some((node, pages)) = field.strip_prefix('N').and_then(|f| f.split_once('=')) {
            if let (Ok(n), Ok(p)) = (node.parse::<u32>(), pages.parse::<u64>()) {
                *out.entry(n).or_default() += p;
            }
        }
    }
    out
}

pub fn check(ctx: &Context) -> Vec<Finding> {
    let root = ctx.root;
    let nodes: Vec<(u32, crate::cpulist::CpuSet)> = root
        .list("sys/devices/system/node")
        .iter()
        .filter_map(|n| {
            let id: u32 = n.strip_prefix("node")?.parse().ok()?;
            Some((id, parse_list(&root.read(&format!("sys/devices/system/node/{n}/cpulist")).ok()?)?))
        })
        .collect();
    if nodes.is_empty() {
        return vec![Finding::unknown(
            "numa",
            Source::NumaEffects,
            "NUMA topology not exposed (/sys/devices/system/node)",
        )];
    }
    if nodes.len() == 1 {
        return vec![Finding::ok(
            "numa",
            Source::NumaEffects,
            "one NUMA node: no remote memory",
            vec![format!("node0 holds CPUs {}", format_list(&nodes[0].1))],
        )];
    }
    let cpu_nodes: Vec<u32> =
        nodes.iter().filter(|(_, c)| c.intersection(&ctx.target.cpus).next().is_some()).map(|(n, _)| *n).collect();
    let mut evidence = vec![format!(
        "{} NUMA nodes; its CPUs {} are on node(s) {:?}",
        nodes.len(),
        format_list(&ctx.target.cpus),
        cpu_nodes
    )];
    let mut needs_root = Vec::new();
    let mut pages: BTreeMap<u32, u64> = BTreeMap::new();
    for &pid in &ctx.target.pids {
        match root.read(&format!("proc/{pid}/numa_maps")) {
            Ok(text) => pages_by_node(&text).into_iter().for_each(|(n, p)| *pages.entry(n).or_default() += p),
            Err(kind) => needs_root.push(format!("/proc/{pid}/numa_maps ({kind:?})")),
        }
    }
    let total: u64 = pages.values().sum();
    let remote: u64 = pages.iter().filter(|(n, _)| !cpu_nodes.contains(n)).map(|(_, p)| p).sum();
    if total > 0 {
        evidence.push(format!(
            "memory pages by node: {pages:?}; {:.0}% on nodes without its CPUs",
            remote as f64 * 100.0 / total as f64
        ));
    }
    let spans = cpu_nodes.len() > 1 && !ctx.target.is_node();
    let remote_share = if total > 0 { remote as f64 / total as f64 } else { 0.0 };
    if !spans && remote_share < 0.1 {
        return vec![Finding::ok("numa", Source::NumaEffects, "threads and memory on one node", evidence)
            .with_needs_root(needs_root)];
    }
    vec![Finding::issue(
        "numa",
        Source::NumaEffects,
        if remote_share >= 0.25 { Severity::Problem } else { Severity::Warn },
        if spans { "its threads may run on several NUMA nodes".to_string() } else { format!("{:.0}% of its memory is remote", remote_share * 100.0) },
        evidence,
        "remote memory accesses and cross-node cache traffic lengthen every request's processing time",
        "pin the service to one node's CPUs and memory (`numactl --cpunodebind=N --membind=N`), or run one instance per node with a partitioned key space (Tales)",
        node_cannot("partly: a tier's `cpus` fence pins the CPUs, but the agent leaves cpuset.mems as the parent's"),
    )
    .with_needs_root(needs_root)]
}

#[cfg(test)]
mod tests {
    use crate::finding::Severity;
    use crate::fixtures::finding;

    #[test]
    fn memory_on_the_other_node_is_a_problem() {
        let f = finding("contended", "numa");
        assert_eq!(f.severity, Severity::Problem, "{f:?}");
        assert!(f.summary.contains("98% of its memory is remote"), "{}", f.summary);
    }

    #[test]
    fn one_node_is_fine() {
        let f = finding("healthy", "numa");
        assert_eq!(f.severity, Severity::Ok);
        assert!(f.summary.contains("one NUMA node"));
    }
}
