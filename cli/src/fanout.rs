//! `tailor fanout`: TailGuard on real sockets — the demo (max load under SLO per scheme, real vs simulated), R_th
//! calibration, and probes of one configuration.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use tailor_bench::fanout_demo::{self as demo, Loaded, Pace};
use tailor_fanout::Scheme;

use crate::fanout_probe;
use crate::output::{print_json, repo_path, OutputArg};
use crate::progress::Reporter;
use tailor_core::Progress;

#[derive(Args)]
pub struct FanoutArgs {
    #[command(subcommand)]
    command: FanoutCommand,
}

#[derive(Subcommand)]
enum FanoutCommand {
    /// Handler + 32 task servers on loopback, open-loop Poisson: max load under SLO for
    /// TF-EDFQ, T-EDFQ, PRIQ and FIFO, real and simulated side by side, then admission
    /// control at overload (docs/fanout.md).
    Demo(DemoArgs),
    /// Pick R_th: the largest candidate that keeps every class within its SLO at
    /// `overload` × the max load (TF-EDFQ, real testbed).
    Calibrate(CalibrateArgs),
    /// One judged real probe of a configuration at one load: per-group bounds and the slowest queries traced.
    Probe {
        /// Fan-out configuration (TOML).
        config: PathBuf,
        /// tf-edfq, t-edfq, priq or fifo.
        #[arg(value_parser = parse_scheme)]
        scheme: Scheme,
        /// Load (utilization of the servers).
        load: f64,
    },
    /// The simulated side alone: the scheme's max load under SLO, optionally with a per-task overhead.
    Sim {
        /// Fan-out configuration (TOML).
        config: PathBuf,
        /// tf-edfq, t-edfq, priq or fifo.
        #[arg(value_parser = parse_scheme)]
        scheme: Scheme,
        /// Mean per-task overhead, µs (fixed, or lognormal with OVERHEAD_P99_US).
        overhead_us: Option<f64>,
        /// p99 of the per-task overhead, µs.
        overhead_p99_us: Option<f64>,
    },
    /// Sequential queries (fan-outs e.g. `1,10,32`) at one load: the proportional budget split against the equal one.
    Sequential {
        /// Fan-out configuration (TOML).
        config: PathBuf,
        /// Fan-outs of the sequential steps, comma-separated.
        #[arg(value_delimiter = ',', required = true)]
        fanouts: Vec<u32>,
        /// Load (utilization of the servers).
        load: f64,
    },
}

#[derive(Args)]
pub struct DemoArgs {
    #[command(flatten)]
    output: OutputArg,
    /// Two-class configuration (its schemes, fan-outs, SLOs, search) [default: the built-in
    /// fanout/configs/mixture-two-class.toml, where the fan-out term matters; --paper:
    /// masstree-two-class.toml].
    #[arg(long)]
    config: Option<PathBuf>,
    /// Single-class configuration, run after the two-class one (`none` to skip) [default: the
    /// built-in fanout/configs/mixture-one-class.toml; --paper: masstree-one-class.toml].
    #[arg(long)]
    one_class: Option<PathBuf>,
    /// The defaults become TailGuard's own Masstree setting (fan-outs 1/10/32), where
    /// fan-out-aware deadlines gain little over T-EDFQ (docs/fanout.md, "Choosing a configuration").
    #[arg(long)]
    paper: bool,
    /// Short probes and a coarse search (about a minute; for tests).
    #[arg(long)]
    quick: bool,
    /// Skip the simulator side.
    #[arg(long)]
    no_sim: bool,
    /// Skip admission control at overload.
    #[arg(long)]
    no_admission: bool,
    /// R_th for the overload check [default: calibrate on the fly, largest candidate that holds].
    #[arg(long)]
    r_th: Option<f64>,
}

#[derive(Args)]
struct CalibrateArgs {
    #[command(flatten)]
    output: OutputArg,
    /// Configuration with an [admission] section [default: the built-in
    /// fanout/configs/mixture-two-class.toml; --paper: masstree-two-class.toml].
    #[arg(long)]
    config: Option<PathBuf>,
    /// The default configuration is TailGuard's Masstree setting.
    #[arg(long)]
    paper: bool,
    /// Max load of TF-EDFQ without admission [default: search for it first].
    #[arg(long)]
    max_load: Option<f64>,
    /// Short probes and a coarse search (about a minute; for tests).
    #[arg(long)]
    quick: bool,
}

/// The built-in configurations: embedded, so the defaults work from any directory; their
/// relative table paths resolve against the repository `tailor` was built from. The
/// default is the mixture, where TailGuard's fan-out-aware deadlines show their gain; the
/// paper's Masstree setting is `--paper`.
const TWO_CLASS: (&str, &str) =
    ("fanout/configs/mixture-two-class.toml", include_str!("../../fanout/configs/mixture-two-class.toml"));
const ONE_CLASS: (&str, &str) =
    ("fanout/configs/mixture-one-class.toml", include_str!("../../fanout/configs/mixture-one-class.toml"));
const PAPER_TWO_CLASS: (&str, &str) =
    ("fanout/configs/masstree-two-class.toml", include_str!("../../fanout/configs/masstree-two-class.toml"));
const PAPER_ONE_CLASS: (&str, &str) =
    ("fanout/configs/masstree-one-class.toml", include_str!("../../fanout/configs/masstree-one-class.toml"));

/// The built-in (two-class, one-class) pair.
fn builtins(paper: bool) -> ((&'static str, &'static str), (&'static str, &'static str)) {
    if paper {
        (PAPER_TWO_CLASS, PAPER_ONE_CLASS)
    } else {
        (TWO_CLASS, ONE_CLASS)
    }
}

pub fn main(args: FanoutArgs) -> Result<(), String> {
    match args.command {
        FanoutCommand::Demo(a) => run_demo(a),
        FanoutCommand::Calibrate(a) => run_calibrate(a),
        FanoutCommand::Probe { config, scheme, load } => fanout_probe::probe(&config, scheme, load),
        FanoutCommand::Sim { config, scheme, overhead_us, overhead_p99_us } => {
            fanout_probe::sim(&config, scheme, overhead_us, overhead_p99_us)
        }
        FanoutCommand::Sequential { config, fanouts, load } => fanout_probe::sequential(&config, fanouts, load),
    }
}

/// The file given, or the built-in configuration.
fn load(path: Option<&Path>, builtin: (&str, &str)) -> Result<Loaded, String> {
    match path {
        Some(p) => Loaded::load(p).map_err(|e| e.to_string()),
        None => Loaded::from_toml(builtin.1, &repo_path(builtin.0)).map_err(|e| e.to_string()),
    }
}

pub fn run_demo(a: DemoArgs) -> Result<(), String> {
    let progress = Reporter::new();
    let log = &progress;
    let (two_builtin, one_builtin) = builtins(a.paper);
    let two = load(a.config.as_deref(), two_builtin)?;
    let pace = Pace::of(&two, a.quick);
    eprintln!(
        "{}: runs of {:.1} s + {:.1} s warm-up, pooled per probe until every group is decided at {:.0}% or {:.0} s; search to ±{:.2}",
        two.cfg.name,
        pace.measure.as_secs_f64(),
        pace.warmup.as_secs_f64(),
        pace.confidence * 100.0,
        pace.cap.as_secs_f64(),
        pace.tolerance
    );
    let started = std::time::Instant::now();
    let results = demo::run_schemes(&two, pace, !a.no_sim, log).map_err(|e| e.to_string())?;
    let mut out = demo::format_table(&two, &results);
    let mut json = serde_json::json!({ "schema": "tailor.fanout-demo/v1", "configs": [schemes_json(&two, &results)] });
    if a.one_class.as_deref() != Some(Path::new("none")) {
        let one = load(a.one_class.as_deref(), one_builtin)?;
        let r1 = demo::run_schemes(&one, Pace::of(&one, a.quick), !a.no_sim, log).map_err(|e| e.to_string())?;
        out += "\n";
        out += &demo::format_table(&one, &r1);
        json["configs"].as_array_mut().expect("an array").push(schemes_json(&one, &r1));
    }
    if !a.no_admission {
        let mut tf = results.iter().find(|r| r.scheme == Scheme::TfEdfq).map(|r| r.real_max_load).unwrap_or(0.0);
        let adm = two.for_admission();
        if adm.cfg.queuing != two.cfg.queuing {
            // The overload check runs with other queuing: its own max load first.
            log.line(&format!("admission runs with {:?} queuing: TF-EDFQ's max load there first", adm.cfg.queuing));
            let mut lq = adm.clone();
            lq.cfg.schemes = vec![Scheme::TfEdfq];
            tf = demo::run_schemes(&lq, pace, false, log).map_err(|e| e.to_string())?[0].real_max_load;
            out += &format!("\nTF-EDFQ max load with {:?} queuing (for admission): {tf:.3}\n", adm.cfg.queuing);
        }
        if tf <= 0.0 {
            out += "\nadmission: skipped, TF-EDFQ met no SLO in the search range\n";
        } else {
            let overload = two.cfg.admission.as_ref().map_or(1.5, |x| x.overload);
            let r = match a.r_th {
                Some(r_th) => vec![demo::run_admission(&two, pace, r_th, tf * overload).map_err(|e| e.to_string())?],
                None => {
                    log.line(&format!("calibrating R_th at {overload}× the max load {tf:.3}"));
                    demo::calibrate(&two, pace, tf, log).map_err(|e| e.to_string())?.1
                }
            };
            out += &format!(
                "\nadmission control, TF-EDFQ, {:?} queuing{}, at {overload}× its max load {tf:.3}\n\n| R_th | side | offered | accepted | accepted / max | rejected | per-class p99 / SLO (ms) (admitted) | holds | worst (class, fan-out) group |\n|---:|---|---:|---:|---:|---:|---|---|---|\n",
                adm.cfg.queuing,
                two.cfg.admission.as_ref().map_or(String::new(), |x| {
                    [
                        (x.predict, "predicted misses"),
                        (x.proportional, "proportional admission"),
                        (x.per_server, "one ratio per server"),
                        (x.reject_late, "late tasks rejected"),
                    ]
                    .iter()
                    .filter(|(on, _)| *on)
                    .map(|(_, name)| format!(", {name}"))
                    .collect()
                })
            );
            let share = |a: f64| if a.is_nan() { String::new() } else { format!(" ({:.0}%)", 100.0 * a) };
            let row = |side: &str, x: &demo::AdmissionResult| {
                format!(
                    "| {:.4} | {side} | {:.3} | {:.3} | {:.0}% | {:.1}% | {} | {} | {} |\n",
                    x.r_th,
                    x.offered_load,
                    x.accepted_load,
                    100.0 * x.accepted_load / tf,
                    x.rejected_pct,
                    x.classes
                        .iter()
                        .map(|c| format!("{} {:.2}/{:.1}{}", c.name, c.quantile_ms, c.slo_ms, share(c.accepted)))
                        .collect::<Vec<_>>()
                        .join(", "),
                    if x.holds() { "yes" } else { "no" },
                    x.worst_group.as_ref().map_or("—".into(), |(k, g)| format!(
                        "{}, {k}: {:.2}/{:.1}{}",
                        g.name,
                        g.quantile_ms,
                        g.slo_ms,
                        share(g.accepted)
                    ))
                )
            };
            json["admission"] = serde_json::Value::Array(r.iter().map(|x| admission_json(x, tf)).collect());
            for x in &r {
                out += &row("real", x);
                if let Some(sim) = &x.simulated {
                    out += &row("sim", sim);
                }
            }
            out += "\n(sim: the same configuration in the simulator with the overhead the real run measured; it models the miss ratio (a miss counted at dequeue) and `reject_late`, not `predict`, `proportional` or `per_server`.)\n";
        }
    }
    drop(progress);
    if a.output.json() {
        print_json(&json);
    } else {
        println!("{out}");
    }
    eprintln!("demo took {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// One configuration's max loads per scheme, for `-o json`.
fn schemes_json(l: &Loaded, results: &[demo::SchemeResult]) -> serde_json::Value {
    let schemes: Vec<_> = results
        .iter()
        .map(|r| {
            serde_json::json!({
                "scheme": r.scheme.name(),
                "real_max_load": r.real_max_load,
                "sim_max_load": r.sim_max_load,
            })
        })
        .collect();
    serde_json::json!({ "config": l.cfg.name, "schemes": schemes })
}

/// One admission check (real, with its simulated twin), for `-o json`.
fn admission_json(x: &demo::AdmissionResult, max_load: f64) -> serde_json::Value {
    let side = |x: &demo::AdmissionResult| {
        serde_json::json!({
            "offered_load": x.offered_load,
            "accepted_load": x.accepted_load,
            "rejected_pct": x.rejected_pct,
            "holds": x.holds(),
            "classes": x.classes.iter().map(|c| serde_json::json!({
                "class": c.name, "quantile_ms": c.quantile_ms, "slo_ms": c.slo_ms,
            })).collect::<Vec<_>>(),
        })
    };
    serde_json::json!({
        "r_th": x.r_th,
        "max_load": max_load,
        "real": side(x),
        "simulated": x.simulated.as_deref().map(side),
    })
}

fn run_calibrate(a: CalibrateArgs) -> Result<(), String> {
    let progress = Reporter::new();
    let log = &progress;
    let l = load(a.config.as_deref(), builtins(a.paper).0)?;
    let pace = Pace::of(&l, a.quick);
    let max = match a.max_load {
        Some(m) => m,
        None => {
            let mut lq = l.for_admission();
            lq.cfg.schemes = vec![Scheme::TfEdfq];
            let r = demo::run_schemes(&lq, pace, false, log).map_err(|e| e.to_string())?;
            r[0].real_max_load
        }
    };
    if max <= 0.0 {
        return Err("TF-EDFQ meets no SLO in the search range: nothing to calibrate against".into());
    }
    let (best, _) = demo::calibrate(&l, pace, max, log).map_err(|e| e.to_string())?;
    drop(progress);
    if a.output.json() {
        print_json(&serde_json::json!({ "config": l.cfg.name, "max_load": max, "r_th": best }));
        return Ok(());
    }
    match best {
        Some(r) => println!("R_th = {r} (largest candidate holding every class SLO at overload; max load {max:.3})"),
        None => println!("no R_th candidate holds the SLOs at overload (max load {max:.3}); try smaller candidates"),
    }
    Ok(())
}

fn parse_scheme(s: &str) -> Result<Scheme, String> {
    Scheme::parse(s).map_err(|e| e.to_string())
}
