//! Background processes: other runnable work on the service's CPUs. Measured by the run-queue
//! delay of the service's own threads (schedstat, sampled), by which other threads used the
//! same CPUs meanwhile, and by CPU pressure (PSI).

use crate::checks::{pressure, Context};
use crate::cpulist::format_list;
use crate::finding::{node_can, Finding, Severity, Source};

/// Share of the service's runnable time spent waiting for a CPU above which it is a problem.
const PROBLEM_WAIT_SHARE: f64 = 0.10;
const WARN_WAIT_SHARE: f64 = 0.02;
/// Mean wait per time slice (≈ per wake-up) above which it is a problem, ns.
const PROBLEM_WAIT_PER_SLICE_NS: f64 = 200_000.0;
const WARN_WAIT_PER_SLICE_NS: f64 = 50_000.0;
/// Other work using this share of one of the service's CPUs is named.
const OTHER_WORK_SHARE: f64 = 0.05;
/// Node-wide CPU pressure (PSI some avg10, %) that is a problem / worth a warning.
const PROBLEM_PSI: f64 = 10.0;
const WARN_PSI: f64 = 2.0;

pub fn check(ctx: &Context) -> Vec<Finding> {
    let deltas = ctx.deltas();
    let interval = ctx.interval_ns.max(1) as f64;
    let mut evidence = Vec::new();
    let mut severity = Severity::Ok;
    let raise = |s: &mut Severity, to: Severity| *s = (*s).max(to);

    // The service's own threads: how long they waited while runnable.
    let own: Vec<_> = deltas.iter().filter(|d| !ctx.target.is_node() && ctx.is_target(d.pid)).collect();
    let (cpu, delay, slices) =
        own.iter().fold((0u64, 0u64, 0u64), |(c, d, s), t| (c + t.cpu_ns, d + t.run_delay_ns, s + t.slices));
    let wait_share = if cpu + delay > 0 { delay as f64 / (cpu + delay) as f64 } else { 0.0 };
    let wait_per_slice = if slices > 0 { delay as f64 / slices as f64 } else { 0.0 };
    if !ctx.target.is_node() {
        evidence.push(format!(
            "run-queue delay of its {} threads over {:.1} s: {:.1} ms waiting vs {:.1} ms on CPU ({:.1}% of runnable time), {:.0} µs per time slice ({slices} slices) [/proc/PID/task/*/schedstat]",
            own.len(),
            interval / 1e9,
            delay as f64 / 1e6,
            cpu as f64 / 1e6,
            wait_share * 100.0,
            wait_per_slice / 1e3,
        ));
        if wait_share >= PROBLEM_WAIT_SHARE || wait_per_slice >= PROBLEM_WAIT_PER_SLICE_NS {
            raise(&mut severity, Severity::Problem);
        } else if wait_share >= WARN_WAIT_SHARE || wait_per_slice >= WARN_WAIT_PER_SLICE_NS {
            raise(&mut severity, Severity::Warn);
        }
    }

    // Other threads that ran on the service's CPUs meanwhile, heaviest first.
    let mut others: Vec<_> = deltas
        .iter()
        .filter(|d| !ctx.is_target(d.pid) || ctx.target.is_node())
        .filter(|d| !ctx.ignore_pids.contains(&d.pid) && ctx.target.cpus.contains(&d.processor))
        .filter(|d| d.cpu_ns as f64 / interval >= OTHER_WORK_SHARE)
        // SCHED_IDLE work (e.g. `chrt -i` builds) yields to the service at once: not a source.
        .filter(|d| d.policy != crate::task::SCHED_IDLE)
        .collect();
    others.sort_by_key(|o| std::cmp::Reverse(o.cpu_ns));
    let other_cpu: f64 = others.iter().map(|d| d.cpu_ns as f64 / interval).sum();
    // SCHED_IDLE work on those CPUs: it shows in CPU pressure (its tasks wait for a CPU) but
    // yields to everything else at once.
    let idle_cpu: f64 = deltas
        .iter()
        .filter(|d| d.policy == crate::task::SCHED_IDLE && ctx.target.cpus.contains(&d.processor))
        .map(|d| d.cpu_ns as f64 / interval)
        .sum();
    for d in others.iter().take(5) {
        evidence.push(format!(
            "other work on CPU {}: pid {} tid {} ({}) used {:.0}% of a CPU",
            d.processor,
            d.pid,
            d.tid,
            d.comm,
            d.cpu_ns as f64 / interval * 100.0
        ));
    }
    let busy_others = others.len();
    if !ctx.target.is_node() && busy_others > 0 && severity == Severity::Ok {
        // Other work shares the CPUs but did not delay the service in this sample.
        raise(&mut severity, Severity::Warn);
    }

    let ncpus = ctx.target.cpus.len().max(1) as f64;
    let only_idle_work = ctx.target.is_node() && idle_cpu >= 0.5 && other_cpu <= 0.5 * ncpus;
    let mut needs_root = Vec::new();
    let mut pressure_avg10 = None;
    match pressure::read(ctx.root, ctx.target.cgroup.as_deref()) {
        Ok((p, file)) => {
            evidence.push(format!("CPU pressure: some avg10={:.2}% avg60={:.2}% [{file}]", p.some_avg10, p.some_avg60));
            pressure_avg10 = Some(p.some_avg10);
            if ctx.target.is_node() {
                // Pressure while work outside SCHED_IDLE uses at most half the CPUs is idle-class
                // work waiting for them, which delays nothing else: worth knowing, not a problem.
                if p.some_avg10 >= PROBLEM_PSI && !only_idle_work {
                    raise(&mut severity, Severity::Problem);
                } else if p.some_avg10 >= WARN_PSI {
                    raise(&mut severity, Severity::Warn);
                }
            }
        }
        Err(why) => evidence.push(why.to_string()),
    }
    if ctx.target.is_node() && idle_cpu >= OTHER_WORK_SHARE {
        evidence.push(format!(
            "SCHED_IDLE work used {idle_cpu:.2} CPUs of CPUs {} (it yields to every other class at once)",
            format_list(&ctx.target.cpus)
        ));
    }
    if ctx.after.tasks.len() < 2 {
        needs_root.push("other processes' threads (/proc/PID/task) were not readable".to_string());
    }

    let cpus = format_list(&ctx.target.cpus);
    let metrics =
        [("wait_share", wait_share), ("wait_per_slice_us", wait_per_slice / 1e3), ("other_work_cpus", other_cpu)];
    if severity == Severity::Ok {
        let summary = format!("no other work delays it on CPUs {cpus}");
        return vec![Finding::ok("run_delay", Source::BackgroundProcesses, summary, evidence)
            .with_needs_root(needs_root)
            .with_metrics(&metrics)];
    }
    let summary = if ctx.target.is_node() {
        let waiting = pressure_avg10.map_or(String::new(), |p| format!(" {p:.0}% of the time"));
        if only_idle_work {
            format!(
                "tasks wait for a CPU{waiting}, but work outside SCHED_IDLE uses {other_cpu:.2} of its {ncpus:.0} CPUs: \
                 the waiting is SCHED_IDLE work ({idle_cpu:.2} CPUs), which yields to a service at once"
            )
        } else {
            format!("tasks wait for a CPU{waiting}: {busy_others} busy threads outside SCHED_IDLE share CPUs {cpus}")
        }
    } else {
        format!(
            "its threads wait {:.0}% of their runnable time for CPUs {cpus}; {busy_others} other threads use {:.2} CPUs there",
            wait_share * 100.0,
            other_cpu
        )
    };
    let effect = if ctx.target.is_node() {
        "runnable tasks wait for a CPU (the PSI share above): a request arriving then waits too".to_string()
    } else {
        format!(
            "each wake-up of the service waits ~{:.0} µs for a CPU on average, more in the tail; waiting was {:.0}% of its runnable time — this adds directly to request latency",
            wait_per_slice / 1e3,
            wait_share * 100.0
        )
    };
    // SCHED_IDLE for the other work first: on nginx beside a busy loop it cut measured/ideal
    // in every validation round, the server in SCHED_FIFO in one of three (docs/results/doctor.md).
    let fix = "move the other work below the service: SCHED_IDLE or an idle cgroup (Temper's fence); or give the service CPUs of its own, or raise it to a real-time class (Tales: raise priority to realtime or assign a dedicated core)";
    let node_fix = node_can(
        "yes: a critical tier matching the service with `cpus = \"…\"` (cpuset fence) and `rt_priority = 1`, and a best-effort tier for the other work (cpu.idle / SCHED_IDLE); journaled, undone by `tailor node safe-mode`",
    );
    vec![Finding::issue("run_delay", Source::BackgroundProcesses, severity, summary, evidence, effect, fix, node_fix)
        .with_needs_root(needs_root)
        .with_metrics(&metrics)]
}

#[cfg(test)]
mod tests {
    use crate::finding::Severity;
    use crate::fixtures::{diagnose_case, finding};
    use crate::target::TargetSpec;

    #[test]
    fn a_spinner_on_the_service_cpu_is_named_with_the_run_delay_it_causes() {
        let f = finding("contended", "run_delay");
        assert_eq!(f.severity, Severity::Problem, "{f:?}");
        assert!(f.summary.contains("wait 67%"), "{}", f.summary);
        assert!(
            f.evidence.iter().any(|e| e.contains("pid 200") && e.contains("spinner") && e.contains("90%")),
            "{f:?}"
        );
        assert!(f.evidence.iter().any(|e| e.contains("some avg10=35.10")), "{f:?}");
        assert!(f.node_fix.applicable);
    }

    #[test]
    fn a_lone_service_and_sched_idle_work_are_all_clear() {
        let f = finding("healthy", "run_delay");
        assert_eq!(f.severity, Severity::Ok, "{f:?}");
        assert!(!f.evidence.iter().any(|e| e.contains("idle-builder")), "{f:?}");
    }

    #[test]
    fn the_whole_node_is_judged_by_its_cpu_pressure() {
        let busy = diagnose_case("contended", TargetSpec::Node);
        assert_eq!(busy.finding("run_delay").unwrap().severity, Severity::Problem);
        let quiet = diagnose_case("healthy", TargetSpec::Node);
        assert_eq!(quiet.finding("run_delay").unwrap().severity, Severity::Ok);
    }

    #[test]
    fn pressure_from_sched_idle_work_alone_is_a_warning_that_says_so() {
        // PSI counts SCHED_IDLE tasks waiting for the CPUs (builds under `chrt -i`): 99.7% here,
        // while the only work outside SCHED_IDLE is the service's thread at 0.4 CPUs.
        let d = diagnose_case("idle-pressure", TargetSpec::Node);
        let f = d.finding("run_delay").unwrap();
        assert_eq!(f.severity, Severity::Warn, "{f:?}");
        assert!(
            f.summary.contains("100% of the time") && f.summary.contains("is SCHED_IDLE work (1.00 CPUs)"),
            "{}",
            f.summary
        );
        assert!(f.evidence.iter().any(|e| e.starts_with("SCHED_IDLE work used 1.00 CPUs")), "{f:?}");
        // The same pressure with a busy normal thread is a problem.
        let busy = diagnose_case("contended", TargetSpec::Node).finding("run_delay").unwrap().clone();
        assert!(busy.summary.contains("busy threads outside SCHED_IDLE"), "{}", busy.summary);
    }
}
