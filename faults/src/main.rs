//! `tailor-faults`: runs the fault-injection suite and prints the failure-modes table
//! (`--report`), or one of the child roles the suite starts (`agent`, `supervise`,
//! `service`). Needs root or CAP_SYS_NICE (and CAP_SYS_ADMIN to reuse thread ids on purpose).

use tailor_faults::{child, node, report};

const USAGE: &str = "usage: tailor-faults --report [--only NAME]   (runs every fault on real processes, ~1 min)\n\
                     child roles (started by the suite): agent | supervise | service --table PATH ...";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("agent") => child::Args::parse(&args[1..]).and_then(|a| child::agent(&a)),
        Some("supervise") => child::Args::parse(&args[1..]).and_then(|a| child::supervise(&a, &args[1..])),
        Some("service") => child::Args::parse(&args[1..]).and_then(|a| child::service(&a)),
        Some("--report") => run_report(&args[1..]),
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
