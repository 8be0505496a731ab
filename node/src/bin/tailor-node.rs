//! `tailor-node`: the node agent on its own (the same commands as `tailor node ...`), plus the
//! ladder's helper processes. The integration tests drive this binary.

use std::path::PathBuf;

use tailor_node::runner::{self, AgentCommand};
use tailor_node::{Capabilities, NodeConfig};
use tailor_telemetry::LogFormat;

const USAGE: &str = "usage: tailor-node [--log-level LEVEL] [--log-format text|json] run --config FILE [--heartbeat] | supervise --config FILE | \
                     safe-mode --config FILE [--off] | probe | example | \
                     ladder [--quick] [--out DIR] [--server probe|redis] [--rate R] [--service-us U] [--workers N] [--reps N]";

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    // Daemons log JSON lines by default (for a log shipper); every command takes --log-level/--log-format.
    let daemon = matches!(args.first().map(String::as_str), Some("run" | "supervise"));
    let format = if daemon { LogFormat::Json } else { LogFormat::Text };
    if let Err(e) = tailor_telemetry::take_log_flags(&mut args, format) {
        exit(Err(e.to_string()));
    }
    let Some(sub) = args.first().cloned() else {
        eprintln!("{USAGE}");
        std::process::exit(2);
    };
    let rest = &args[1..];
    if let Some(result) = tailor_node::ladder::probe::helper_main(&sub, rest) {
        exit(result);
    }
    let config_path = || -> Result<PathBuf, String> {
        rest.iter()
            .position(|a| a == "--config")
            .and_then(|i| rest.get(i + 1))
            .map(PathBuf::from)
            .ok_or_else(|| format!("{sub}: --config FILE is required"))
    };
    let load = || -> Result<NodeConfig, String> { NodeConfig::load(&config_path()?).map_err(|e| e.to_string()) };
    let result = match sub.as_str() {
        "run" => config_path()
            .and_then(|p| runner::run(&p, rest.iter().any(|a| a == "--heartbeat")).map_err(|e| e.to_string())),
        "supervise" => config_path().and_then(|p| {
            let program = std::env::current_exe().map_err(|e| e.to_string())?;
            runner::supervise(&p, AgentCommand { program, prefix: Vec::new() }).map_err(|e| e.to_string())
        }),
        "safe-mode" => load().and_then(|c| {
            let msg = runner::safe_mode(&c, rest.iter().any(|a| a == "--off")).map_err(|e| e.to_string())?;
            println!("{msg}");
            Ok(())
        }),
        "ladder" => {
            let mut opts = if rest.iter().any(|a| a == "--quick") {
                tailor_node::ladder::LadderOptions::quick()
            } else {
                tailor_node::ladder::LadderOptions::standard()
            };
            let value = |k: &str| rest.iter().position(|a| a == k).and_then(|i| rest.get(i + 1));
            if let Some(v) = value("--rate").and_then(|v| v.parse().ok()) {
                opts.rate_per_s = v;
            }
            if let Some(v) = value("--service-us").and_then(|v| v.parse().ok()) {
                opts.service_us = v;
            }
            if let Some(v) = value("--workers").and_then(|v| v.parse().ok()) {
                opts.workers = v;
            }
            if let Some(v) = value("--reps").and_then(|v| v.parse().ok()) {
                opts.reps = v;
            }
            if let Some(v) = value("--steps") {
                opts.steps = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
            }
            if let Some(v) = value("--window-s").and_then(|v| v.parse().ok()) {
                opts.window_s = v;
            }
            match value("--server").map(|s| s.as_str()) {
                None | Some("probe") => {}
                Some("redis") => opts.server = tailor_node::ladder::Server::Redis,
                Some(other) => exit(Err(format!("ladder --server {other:?}: use probe or redis"))),
            }
            let out = PathBuf::from(value("--out").map(|s| s.as_str()).unwrap_or("out/ladder"));
            std::env::current_exe().map_err(|e| e.to_string()).and_then(|program| {
                opts.helper = Some(AgentCommand { program, prefix: Vec::new() });
                let report = tailor_node::ladder::run(&opts, |l| eprintln!("{l}"))?;
                print!("{}", tailor_node::ladder::table(&report));
                tailor_node::ladder::write_outputs(&report, &out).map(|_| ())
            })
        }
        "probe" => {
            println!("{}", Capabilities::probe());
            Ok(())
        }
        "example" => {
            print!("{}", tailor_node::config::EXAMPLE);
            Ok(())
        }
        _ => Err(format!("unknown command {sub:?}; {USAGE}")),
    };
    exit(result);
}

fn exit(result: Result<(), String>) -> ! {
    match result {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("tailor-node: {e}");
            std::process::exit(2);
        }
    }
}
