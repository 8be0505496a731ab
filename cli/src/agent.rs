//! `tailor scheduler` (alias `tailor agent`): the kernel scheduler agent of the kernel-enforced
//! runtime backend (docs/runtime.md). Not the node tier agent (`tailor node run`).

use std::path::PathBuf;

use clap::Args;
use tailor_runtime::kernel::{self, AgentConfig, Enforce};

#[derive(Args)]
pub struct AgentArgs {
    /// The shared-memory registration table services attach to (`{"kind": "kernel", "table": ...}`).
    #[arg(long, default_value = "/dev/shm/tailor-sched")]
    table: PathBuf,
    /// Policy: orf, orf-adaptive (orf whose c an online controller tunes; --enforce band
    /// only), rr, ps, edf, fifo, gfifo, priq, lifo.
    #[arg(long, default_value = "orf")]
    policy: String,
    /// orf: jobs sharing the CPUs round-robin (the pool of the c oldest).
    #[arg(long, default_value_t = 6)]
    c: usize,
    /// orf-adaptive: the largest c the controller may choose.
    #[arg(long, default_value_t = kernel::AdaptiveArgs::default().c_max)]
    c_max: usize,
    /// orf-adaptive: completed jobs per decision (the first windows are shorter).
    #[arg(long, default_value_t = kernel::AdaptiveArgs::default().window_jobs)]
    window_jobs: usize,
    /// Time slice of orf/rr/ps in µs. 500 µs by default: each rotation costs the agent
    /// two sched_setscheduler calls, so 30 µs slices would spend a large share of a CPU
    /// on rotations (docs/runtime.md has the measurement).
    #[arg(long, default_value_t = 500.0)]
    slice_us: f64,
    /// CPUs the policy schedules: jobs in the SCHED_FIFO band at once. Default: all CPUs this process may use.
    #[arg(long)]
    cpus: Option<usize>,
    /// Table slots: concurrent jobs on the node, all services together.
    #[arg(long, default_value_t = kernel::table::DEFAULT_SLOTS)]
    slots: u32,
    /// How the policy's order reaches the kernel: `band` (the agent runs the policy and
    /// moves jobs into a SCHED_FIFO band and out of it) or `priority` (each job takes a
    /// SCHED_FIFO level from its GAT or deadline and the kernel orders them: orf with
    /// --c = CPUs, gfifo, edf; docs/runtime.md, "Key ordering").
    #[arg(long, default_value = "band", value_parser = ["band", "priority"])]
    enforce: String,
    /// `--enforce priority`: the key span of one priority level, µs. Keys more than 40
    /// levels older than the newest share the top level.
    #[arg(long, default_value_t = 1000.0)]
    bucket_us: f64,
    /// Print the agent's counters once a second.
    #[arg(long)]
    verbose: bool,
    /// CPU idle states while the agent runs: `keep`, or `off` (hold /dev/cpu_dma_latency
    /// at 0: idle CPUs poll, so waking a job on another CPU costs a few µs instead of a
    /// halted CPU's exit; released when the agent exits, however it exits).
    #[arg(long, default_value = "keep", value_parser = ["keep", "off"])]
    idle_states: String,
    /// Run the agent as a supervised child: start a new one when it exits, or when its
    /// heartbeat stands still for --hang-ms (hung). Services re-attach on their own
    /// (docs/failure-modes.md).
    #[arg(long)]
    supervise: bool,
    /// `--supervise`: an agent whose heartbeat stood still this long is killed and replaced.
    #[arg(long, default_value_t = 1000)]
    hang_ms: u64,
    /// Serve Prometheus /metrics, /healthz and /readyz here (e.g. 127.0.0.1:9465); docs/observability.md.
    #[arg(long, value_name = "ADDR")]
    admin_addr: Option<std::net::SocketAddr>,
}

pub fn main(args: AgentArgs) -> Result<(), String> {
    if args.supervise {
        // The same command line without --supervise, as the child.
        let child_args = std::env::args_os().skip(1).filter(|a| a != "--supervise").collect();
        let cfg = kernel::supervise::SupervisorConfig {
            program: std::env::current_exe().map_err(|e| format!("cannot find the tailor binary: {e}"))?,
            args: child_args,
            table: args.table,
            hang_ms: args.hang_ms,
        };
        let report = kernel::supervise::supervise(&cfg, kernel::stop_on_signals()).map_err(|e| e.to_string())?;
        eprintln!("tailor agent supervise: {report:?}");
        return Ok(());
    }
    let adaptive = kernel::AdaptiveArgs { c_max: args.c_max, window_jobs: args.window_jobs };
    let policy = kernel::policy_from_args(&args.policy, args.c, args.slice_us, adaptive)
        .map_err(|e| format!("--policy {} (--c, --c-max, --window-jobs, --slice-us): {e}", args.policy))?;
    let cfg = AgentConfig {
        table: args.table,
        policy,
        cpus: args.cpus.unwrap_or_else(tailor_runtime::available_cpus),
        slots: args.slots,
        verbose: args.verbose,
        enforce: match args.enforce.as_str() {
            "priority" => Enforce::priority_us(args.bucket_us).map_err(|e| format!("--bucket-us {e}"))?,
            _ => Enforce::Band,
        },
    };
    let (rt_runtime, rt_period) = kernel::preflight().map_err(|e| e.to_string())?;
    let enforcement = match cfg.enforce {
        Enforce::Band => format!("band SCHED_FIFO/{}", kernel::BAND_PRIORITY),
        Enforce::Priority { bucket_ns } => format!(
            "key ordering: jobs at SCHED_FIFO 1..={}, one level per {} µs",
            kernel::table::TOP_LEVEL,
            bucket_ns as f64 / 1e3
        ),
    };
    eprintln!(
        "tailor agent: pid {}, table {}, policy {:?} on {} CPUs, {} slots; {enforcement}, agent SCHED_FIFO/{}; \
         RT throttling {rt_runtime}/{rt_period} µs. Stop with Ctrl-C or SIGTERM: every thread is restored.",
        std::process::id(),
        cfg.table.display(),
        cfg.policy,
        cfg.cpus,
        cfg.slots,
        kernel::AGENT_PRIORITY
    );
    let _idle = if args.idle_states == "off" {
        let guard = tailor_node::idle::IdleStatesOff::hold().map_err(|e| e.to_string())?;
        eprintln!("tailor agent: CPU idle states off ({} held at 0)", guard.path().display());
        Some(guard)
    } else {
        None
    };
    let stop = kernel::stop_on_signals();
    let stats = kernel::AgentStats::new();
    let _admin =
        args.admin_addr.map(|addr| kernel::agent_stats::serve(addr, &stats)).transpose().map_err(|e| e.to_string())?;
    let report = kernel::run_agent_with_stats(&cfg, stop, &stats).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&cfg.table);
    eprintln!("{}", report.log_line());
    Ok(())
}
