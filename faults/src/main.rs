//! `tailor-faults`: runs the fault-injection suite and prints the failure-modes table
//! (`--report`; needs root or CAP_SYS_NICE, and CAP_SYS_ADMIN to reuse thread ids on
//! purpose), the proxy's faults (`--proxy`) or its overload run (`--overload`), or one of
//! the child roles the suites start (`agent`, `supervise`, `service`, `proxy`, `upstream`).

use tailor_faults::overload::{self, OverloadPlan};
use tailor_faults::proxyproc;
use tailor_faults::upstream::{self, UpstreamArgs};
use tailor_faults::{child, node, report};

const USAGE: &str = "usage: tailor-faults --report [--only NAME]   (runs every kernel-scheduler fault on real processes, ~1 min)\n\
                     \x20      tailor-faults --proxy [--only NAME]    (the proxy's faults, edge and sidecar, ~30 s)\n\
                     \x20      tailor-faults --overload [--seconds N] (the sidecar at 2x its upstream's capacity, 60 s)\n\
                     child roles (started by the suites): agent | supervise | service --table PATH ... | proxy | upstream";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("agent") => child::Args::parse(&args[1..]).and_then(|a| child::agent(&a)),
        Some("supervise") => child::Args::parse(&args[1..]).and_then(|a| child::supervise(&a, &args[1..])),
        Some("service") => child::Args::parse(&args[1..]).and_then(|a| child::service(&a)),
        Some("proxy") => proxyproc::run_proxy(&args[1..]),
        Some("upstream") => UpstreamArgs::parse(&args[1..]).and_then(|a| upstream::serve(&a)),
        Some("--report") => run_report(&args[1..]),
        Some("--proxy") => run_proxy_report(&args[1..]),
        Some("--overload") => run_overload(&args[1..]),
        _ => Err(USAGE.to_string()),
    };
    if let Err(e) = result {
        eprintln!("tailor-faults: {e}");
        std::process::exit(2);
    }
}

fn run_report(rest: &[String]) -> Result<(), String> {
    if let Some(why) = node::skip_reason() {
        return Err(format!("cannot run the suite here: {why}"));
    }
    let only = match rest {
        [flag, name] if flag == "--only" => Some(name.as_str()),
        [] => None,
        _ => return Err(USAGE.to_string()),
    };
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for (name, case) in report::all() {
        if only.is_none_or(|o| o == name) {
            eprintln!("tailor-faults: {name} ...");
            let _measuring = tailor_faults::cases::MeasuringThread::raise();
            rows.push(case(&exe));
        }
    }
    println!("{}", report::markdown(&rows));
    Ok(())
}

fn run_proxy_report(rest: &[String]) -> Result<(), String> {
    let only = match rest {
        [flag, name] if flag == "--only" => Some(name.as_str()),
        [] => None,
        _ => return Err(USAGE.to_string()),
    };
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let rows = report::proxy_rows(&exe, only);
    println!("{}", report::proxy_markdown(&rows));
    Ok(())
}

fn run_overload(rest: &[String]) -> Result<(), String> {
    let mut plan = OverloadPlan::full();
    match rest {
        [flag, n] if flag == "--seconds" => {
            plan.overload = std::time::Duration::from_secs(n.parse().map_err(|e| format!("--seconds {n}: {e}"))?)
        }
        [] => {}
        _ => return Err(USAGE.to_string()),
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    eprintln!("tailor-faults: overload {plan:?} ...");
    println!("{}", overload::run(&exe, plan).markdown());
    Ok(())
}
