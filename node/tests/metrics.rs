//! The node agent's admin endpoint on a real `tailor-node run` process: `/readyz` after the
//! first reconcile, `/metrics` valid for promtool and counting the process it placed.

mod common;

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use tailor_node::Capabilities;
use tailor_telemetry::testing::{free_loopback_addr, http_get, sample_value, scrape_metrics, Promtool};

#[test]
fn node_agent_serves_metrics_and_readiness() {
    if !root_or_skip("node_agent_serves_metrics_and_readiness") {
        return;
    }
    let sb = Sandbox::new();
    let tier = sb.tier("be");
    let addr = free_loopback_addr();
    let caps = Capabilities::probe();
    let (config, _) = sb.config(&format!(
        "metrics_addr = \"{addr}\"\n[[tier]]\nname = \"{tier}\"\nkind = \"best-effort\"\ncpus = \"{}\"\nidle = true\nsched_idle = true\n",
        caps.online_cpus[0]
    ));
    let target = sleeper(Some(&tier));
    let agent = Proc(Command::new(BIN).arg("run").arg("--config").arg(&config).stderr(Stdio::null()).spawn().unwrap());

    let ready =
        wait_for(Duration::from_secs(10), || matches!(http_get(addr, "/readyz", None), Ok(r) if r.status == 200));
    assert!(ready.is_some(), "/readyz never answered 200 on {addr}");
    assert_eq!(http_get(addr, "/healthz", None).unwrap().status, 200);
    let series = format!("tailor_node_tier_processes{{tier=\"{tier}\"}}");
    let placed = wait_for(Duration::from_secs(10), || {
        scrape_metrics(addr).is_ok_and(|s| sample_value(&s.body, &series) == Some(1.0))
    });
    assert!(placed.is_some(), "{series} never reached 1");

    let scrape = scrape_metrics(addr).unwrap();
    match &scrape.promtool {
        Promtool::Clean => {}
        Promtool::Absent => eprintln!("skipping promtool: not installed (apt-get install prometheus)"),
        Promtool::Problems(p) => panic!("promtool check metrics: {p}\n{}", scrape.body),
    }
    assert_eq!(sample_value(&scrape.body, "tailor_node_enforcing"), Some(1.0));
    assert_eq!(sample_value(&scrape.body, "tailor_node_safe_mode"), Some(0.0));
    assert!(sample_value(&scrape.body, "tailor_node_journal_entries").is_some_and(|n| n >= 1.0), "{}", scrape.body);
    assert!(sample_value(&scrape.body, "tailor_node_reconciles_total").is_some_and(|n| n >= 1.0));
    assert!(sample_value(&scrape.body, "tailor_node_reconcile_duration_seconds_count").is_some_and(|n| n >= 1.0));
    drop(target);

    // SIGTERM: the agent restores and exits; the port closes with it.
    // SAFETY: a signal to the process this test started, by pid.
    unsafe { libc::kill(agent.pid() as i32, libc::SIGTERM) };
    let closed = wait_for(Duration::from_secs(10), || http_get(addr, "/healthz", None).is_err());
    assert!(closed.is_some(), "the admin port outlived the agent");
    drop(agent);
}

#[test]
fn an_unusable_metrics_addr_is_an_error_naming_the_field() {
    if !root_or_skip("an_unusable_metrics_addr_is_an_error_naming_the_field") {
        return;
    }
    let sb = Sandbox::new();
    // Taken: a listener this test holds.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let tier = sb.tier("be");
    let (config, _) = sb.config(&format!(
        "metrics_addr = \"{}\"\n[[tier]]\nname = \"{tier}\"\nkind = \"best-effort\"\n",
        taken.local_addr().unwrap()
    ));
    let out = Command::new(BIN).arg("run").arg("--config").arg(&config).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("metrics_addr") && err.contains("cannot listen"), "{err}");
}
