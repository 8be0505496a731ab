//! `tailor doctor`: the node's sources of excess tail latency for a service (Tales of the Tail,
//! Table 1), and a service's measured latency against its ideal (docs/doctor.md).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tailor_doctor::measured_vs_ideal::{self, ServiceTime};
use tailor_doctor::{inspect, report, InspectOptions, SysRoot, TargetSpec};

use crate::output::{print_json, OutputArg};

#[derive(Args)]
pub struct DoctorArgs {
    /// Inspect this process (all its threads).
    #[arg(long, conflicts_with_all = ["service", "cgroup"])]
    pid: Option<u32>,
    /// Inspect every process named NAME (comm or executable), or in the cgroup NAME.service.
    #[arg(long, value_name = "NAME", conflicts_with = "cgroup")]
    service: Option<String>,
    /// Inspect the processes of a cgroup, a path under the cgroup mount (e.g. /system.slice/nginx.service).
    #[arg(long, value_name = "PATH")]
    cgroup: Option<String>,
    /// How long to sample run-queue delay and interrupt counts.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    interval_ms: u64,
    /// Read /proc and /sys under this directory instead of / (a recorded tree).
    #[arg(long, default_value = "/", value_name = "DIR")]
    root: PathBuf,
    /// Instead of inspecting the node: compare measured latencies with the ideal G/G/c
    /// distribution of the same arrivals (needs --records).
    #[arg(long, requires = "records", conflicts_with_all = ["pid", "service", "cgroup"])]
    ideal: bool,
    /// Per-request records: the bench's per-request CSV or `arrival_ns,latency_ns[,service_ns]`.
    #[arg(long, value_name = "FILE")]
    records: Option<PathBuf>,
    /// Servers (CPUs) of the ideal queue.
    #[arg(long, default_value_t = 1, value_name = "C")]
    cpus: usize,
    /// One core's peak throughput (requests/s): every request's ideal service time is its
    /// inverse (Tales §3.2). Default: the records' measured service times.
    #[arg(long, value_name = "RPS", conflicts_with = "service_us")]
    peak_rps: Option<f64>,
    /// The amortized service time, µs, if known.
    #[arg(long, value_name = "US")]
    service_us: Option<f64>,
    #[command(flatten)]
    output: OutputArg,
}

pub fn main(args: DoctorArgs) -> Result<(), String> {
    if args.ideal {
        return ideal(&args);
    }
    let target = match (args.pid, &args.service, &args.cgroup) {
        (Some(pid), _, _) => TargetSpec::Pid(pid),
        (_, Some(name), _) => TargetSpec::Service(name.clone()),
        (_, _, Some(path)) => TargetSpec::Cgroup(path.clone()),
        _ => TargetSpec::Node,
    };
    let opts =
        InspectOptions { root: SysRoot::at(&args.root), target, interval: Duration::from_millis(args.interval_ms) };
    let diagnosis = inspect(&opts).map_err(|e| e.to_string())?;
    if args.output.json() {
        print_json(&serde_json::to_value(&diagnosis).map_err(|e| e.to_string())?);
    } else {
        print!("{}", report::human(&diagnosis));
    }
    Ok(())
}

fn ideal(args: &DoctorArgs) -> Result<(), String> {
    let file = args.records.as_ref().expect("clap requires --records with --ideal");
    let records = tailor_doctor::records::read(file).map_err(|e| e.to_string())?;
    let service = match (args.peak_rps, args.service_us) {
        (Some(rps), _) => ServiceTime::PeakThroughput(rps),
        (_, Some(us)) if us > 0.0 => ServiceTime::Fixed((us * 1e3).round() as u64),
        (_, Some(us)) => return Err(format!("--service-us must be positive, got {us}")),
        _ => ServiceTime::Measured,
    };
    let report =
        measured_vs_ideal::compare(&records, service, args.cpus).map_err(|e| format!("{}: {e}", file.display()))?;
    if args.output.json() {
        print_json(&serde_json::to_value(&report).map_err(|e| e.to_string())?);
    } else {
        print!("{}", measured_vs_ideal::human(&report));
    }
    Ok(())
}
