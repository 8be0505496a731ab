//! Concurrency architecture: one queue for all workers, or one per worker. Listening sockets
//! come from `/proc/PID/fd` (socket inodes) and `/proc/PID/net/tcp{,6}` (state 0A = LISTEN):
//! several listening sockets on one port mean SO_REUSEPORT, one accept queue per worker; and
//! connections handed to one of several workers for their life queue per worker too.

use std::collections::{BTreeMap, BTreeSet};

use crate::checks::Context;
use crate::finding::{node_cannot, Finding, Severity, Source};
use crate::root::SysRoot;
use crate::task::parse_stat;

/// Listening TCP sockets in a `/proc/net/tcp`-format table: inode → local port.
pub fn listening_ports(table: &str) -> BTreeMap<u64, u16> {
    let mut out = BTreeMap::new();
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[3] != "0A" {
            continue;
        }
        let port = f[1].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
        if let (Some(port), Ok(inode)) = (port, f[9].parse::<u64>()) {
            out.insert(inode, port);
        }
    }
    out
}

/// Socket inodes a process holds, or why they could not be read.
fn socket_inodes(root: &SysRoot, pid: u32) -> Result<BTreeSet<u64>, std::io::ErrorKind> {
    let dir = format!("proc/{pid}/fd");
    std::fs::read_dir(root.path(&dir)).map_err(|e| e.kind())?;
    Ok(root
        .list(&dir)
        .iter()
        .filter_map(|fd| root.link(&format!("{dir}/{fd}")).ok())
        .filter_map(|l| l.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok())
        .collect())
}

pub fn check(ctx: &Context) -> Vec<Finding> {
    if ctx.target.is_node() {
        return Vec::new();
    }
    let root = ctx.root;
    let mut needs_root = Vec::new();
    // port → listening socket inodes; pid → ports it listens on.
    let mut sockets_by_port: BTreeMap<u16, BTreeSet<u64>> = BTreeMap::new();
    let mut holders: BTreeSet<u32> = BTreeSet::new();
    for &pid in &ctx.target.pids {
        let inodes = match socket_inodes(root, pid) {
            Ok(i) => i,
            Err(kind) => {
                needs_root.push(format!("/proc/{pid}/fd ({kind:?}): run as root or as the service's user"));
                continue;
            }
        };
        let mut table = String::new();
        for t in ["tcp", "tcp6"] {
            table.push_str(&root.read(&format!("proc/{pid}/net/{t}")).unwrap_or_default());
            table.push('\n');
        }
        let listening = listening_ports(&table);
        for inode in inodes {
            if let Some(&port) = listening.get(&inode) {
                sockets_by_port.entry(port).or_default().insert(inode);
                holders.insert(pid);
            }
        }
    }
    let ppid = |pid: u32| root.read(&format!("proc/{pid}/stat")).ok().and_then(|s| parse_stat(&s)).map(|s| s.ppid);
    // A master that forked the workers holds the sockets too; its children are the workers.
    let children: Vec<u32> =
        holders.iter().copied().filter(|&p| ppid(p).is_some_and(|pp| holders.contains(&pp))).collect();
    let worker_processes = if children.is_empty() { holders.len() } else { children.len() };
    let busy_threads: BTreeSet<u32> =
        ctx.deltas().iter().filter(|d| ctx.is_target(d.pid) && d.cpu_ns > 0).map(|d| d.tid).collect();

    let mut evidence = vec![format!(
        "{} threads in {} processes, {} of them ran during the sample",
        ctx.target.thread_count,
        ctx.target.pids.len(),
        busy_threads.len()
    )];
    for (port, inodes) in &sockets_by_port {
        evidence.push(format!(
            "port {port}: {} listening socket(s), held by {} process(es)",
            inodes.len(),
            holders.len()
        ));
    }
    if sockets_by_port.is_empty() && needs_root.is_empty() {
        evidence.push("no listening TCP sockets".to_string());
    }
    let reuseport: Vec<(u16, usize)> =
        sockets_by_port.iter().filter(|(_, s)| s.len() > 1).map(|(p, s)| (*p, s.len())).collect();
    let fix_common = "one queue that every worker serves: one listening socket without SO_REUSEPORT (nginx: drop `reuseport`), as few event-loop workers as CPUs, or a thread-per-connection / UDP server (Tales)";
    let cannot = node_cannot("no: the queueing structure is the server's configuration");
    if let Some(&(port, n)) = reuseport.first() {
        return vec![Finding::issue(
            "concurrency",
            Source::ConcurrencyArchitecture,
            Severity::Problem,
            format!("{n} listening sockets on port {port} (SO_REUSEPORT): one accept queue per worker"),
            evidence,
            "the kernel hashes each connection to one worker's queue: a request waits behind a busy worker while another is idle, which a single shared queue never does (c queues of one server instead of one of c)",
            fix_common,
            cannot,
        )
        .with_needs_root(needs_root)];
    }
    let partitioned = if worker_processes > 1 {
        Some(format!("{worker_processes} worker processes share the listening socket; each accepted connection stays with one worker"))
    } else if busy_threads.len() > 1 && !sockets_by_port.is_empty() {
        Some(format!(
            "{} threads serve connections; a server that assigns each connection to one thread queues per thread",
            busy_threads.len()
        ))
    } else {
        None
    };
    match partitioned {
        Some(summary) => vec![Finding::issue(
            "concurrency",
            Source::ConcurrencyArchitecture,
            Severity::Warn,
            summary,
            evidence,
            "with keep-alive connections, requests queue per worker (connections are partitioned statically); the tail grows when one worker's connections are busier",
            fix_common,
            cannot,
        )
        .with_needs_root(needs_root)],
        None if !needs_root.is_empty() => {
            vec![Finding::unknown("concurrency", Source::ConcurrencyArchitecture, "listening sockets not readable")
                .with_needs_root(needs_root)]
        }
        None => vec![Finding::ok(
            "concurrency",
            Source::ConcurrencyArchitecture,
            "one worker or one shared queue",
            evidence,
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::listening_ports;
    use crate::finding::Severity;
    use crate::fixtures::{diagnose_case, finding};
    use crate::target::TargetSpec;

    #[test]
    fn reuseport_sockets_are_per_worker_queues() {
        let f = finding("contended", "concurrency");
        assert_eq!(f.severity, Severity::Problem, "{f:?}");
        assert!(f.summary.contains("2 listening sockets on port 8080"), "{}", f.summary);
    }

    #[test]
    fn workers_sharing_one_socket_are_a_warning_and_one_worker_is_fine() {
        let d = diagnose_case("workers", TargetSpec::Service("nginx".into()));
        let f = d.finding("concurrency").unwrap();
        assert_eq!(f.severity, Severity::Warn, "{f:?}");
        assert!(f.summary.starts_with("2 worker processes"), "{}", f.summary);
        assert_eq!(finding("healthy", "concurrency").severity, Severity::Ok);
    }

    #[test]
    fn only_listening_rows_count() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1065 1 0 100 0 0 10 0\n   1: 020200C0:A180 507100CB:01BB 01 00000000:00000000 00:00000000 00000000     0        0 783188 1 0 20 4 1 86 -1\n";
        let ports = listening_ports(table);
        assert_eq!(ports.into_iter().collect::<Vec<_>>(), vec![(1065, 2024)]);
    }
}
