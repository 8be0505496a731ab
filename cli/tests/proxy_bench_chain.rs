//! The effect benchmark's chain (`tailor bench proxy --effect`), small: `tailor proxy
//! edge` → sidecar → plain Go → sidecar → plain Python → sidecar → plain Go, services that
//! know nothing of Tailor and only forward `baggage`. Structural facts, not timing: every
//! request is answered, every tier serves by the GAT the edge stamped (one hop further at
//! each sidecar), the orf sidecar admits an older waiting request before a younger one
//! (and gives a request's slot back when the service calls out), and no slot leaks; in
//! the `orf-chain` chain the first sidecar keeps the slot while the tiers behind it work.
//! Skips, saying why, without Go or python3.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http::Uri;
use tailor_bench::loadgen::{self, LoadgenConfig, Plan};
use tailor_bench::proxybench::effect::{ChainSpec, ProxyChain, Sidecars, TIERS};
use tailor_bench::proxybench::Programs;
use tailor_bench::record::Outcome;

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_nanos() as u64
}

/// Polls `what` until it is true, up to 30 s (a loaded machine is slow, never wrong).
fn wait_for(why: &str, mut what: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !what() {
        assert!(Instant::now() < deadline, "timed out waiting for {why}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts `sidecars`' chain with one slot at the first tier (so requests queue there) in
/// a directory of its own; None, after saying why, without Go or python3.
fn start_chain(test: &str, sidecars: Sidecars) -> Option<(ProxyChain, PathBuf)> {
    start_chain_with(test, sidecars, [Some(1), Some(2), Some(2)])
}

/// As `start_chain`, each sidecar with `c` (`None`: left out, the adaptive limit).
fn start_chain_with(test: &str, sidecars: Sidecars, c: [Option<usize>; TIERS]) -> Option<(ProxyChain, PathBuf)> {
    let out = std::env::temp_dir().join(format!("tailor-{test}-{}", std::process::id()));
    let programs = match Programs::prepare(Path::new(env!("CARGO_BIN_EXE_tailor")), &out) {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIP {test}: {why}");
            return None;
        }
    };
    let spec = ChainSpec { sidecars, c, python_workers: 2, logs: out.join("logs") };
    Some((ProxyChain::start(&programs, &spec).unwrap_or_else(|e| panic!("{e}")), out))
}

#[test]
fn the_sidecar_chain_answers_every_request_by_one_gat_and_admits_the_oldest_first() {
    let Some((chain, out)) =
        start_chain("the_sidecar_chain_answers_every_request_by_one_gat_and_admits_the_oldest_first", Sidecars::Orf)
    else {
        return;
    };

    // A client's forged context (an hour old) is replaced at the edge; every tier serves the
    // edge's stamp, one hop further behind each sidecar.
    let forged = format!("tailor=1.g{}.c0.k1.h0", now_ns() - 3_600_000_000_000);
    let before = now_ns();
    let lines = chain.trace(&chain.entry, &[("baggage", &forged)]).unwrap_or_else(|e| panic!("{e}"));
    let after = now_ns();
    assert_eq!(lines.len(), TIERS, "{lines:?}");
    let ctx: Vec<_> =
        lines.iter().map(|l| l.context.unwrap_or_else(|| panic!("a tier got no context: {lines:?}"))).collect();
    assert!(ctx.iter().all(|c| c.gat == ctx[0].gat), "the GAT changed between tiers: {lines:?}");
    assert!(before <= ctx[0].gat && ctx[0].gat <= after, "not the edge's stamp ({before}..{after}): {lines:?}");
    assert_eq!(ctx.iter().map(|c| c.hop).collect::<Vec<_>>(), vec![0, 1, 2], "{lines:?}");

    // Concurrent requests with CPU demand: each keeps its own GAT through every tier.
    let gats: Vec<u64> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    (0..10)
                        .map(|_| {
                            let l = chain
                                .trace(&chain.entry, &[("tailor-demand-us", "200,200,200")])
                                .unwrap_or_else(|e| panic!("{e}"));
                            let g: Vec<u64> = l.iter().map(|x| x.context.expect("context").gat).collect();
                            assert!(g.len() == TIERS && g.iter().all(|&x| x == g[0]), "{l:?}");
                            g[0]
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("worker")).collect()
    });
    let mut distinct = gats.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), gats.len(), "two requests got one GAT");

    // A few hundred requests open loop: every one answered.
    let n = 300;
    let plan =
        Plan { intended_ns: (0..n).map(|i| i as u64 * 4_000_000).collect(), demands_us: vec![vec![100, 100, 100]; n] };
    let cfg = LoadgenConfig {
        uri: chain.entry.clone(),
        timeout: Duration::from_secs(30),
        max_in_flight: 1024,
        rt_priority: None,
    };
    let records = loadgen::run(&plan, &cfg).expect("the generator starts");
    let failed: Vec<_> = records.iter().filter(|r| r.outcome != Outcome::Ok).collect();
    assert!(failed.is_empty(), "{} of {n} requests failed, e.g. {:?}", failed.len(), failed.first());

    // Ordering at the first sidecar (c = 1): a long request holds the slot; a younger and
    // then an older request queue behind it. When the long one calls out (its slot given
    // back), the older is admitted first: it starts at the first tier before the younger.
    let first: Uri = format!("http://{}/", chain.sidecar_addrs[0]).parse().expect("uri");
    let shared = &chain;
    let queued = |k: f64| move || shared.sidecar_metric(0, "tailor_proxy_queue_length").is_ok_and(|q| q == k);
    wait_for("an empty queue", queued(0.0));
    let t0 = now_ns();
    let ctx = |gat: u64| format!("1.g{gat}.c0.k1.h0");
    let (blocker, younger, older) = std::thread::scope(|s| {
        let blocker =
            s.spawn(|| chain.trace(&first, &[("tailor-context", &ctx(t0)), ("tailor-demand-us", "300000,0,0")]));
        wait_for("the long request inside", || {
            chain.sidecar_metric(0, "tailor_proxy_in_flight").is_ok_and(|v| v == 1.0)
        });
        let younger = s.spawn(|| chain.trace(&first, &[("tailor-context", &ctx(t0 - 1_000_000_000))]));
        wait_for("the younger request waiting", queued(1.0));
        let older = s.spawn(|| chain.trace(&first, &[("tailor-context", &ctx(t0 - 2_000_000_000))]));
        wait_for("both requests waiting", queued(2.0));
        let j = |h: std::thread::ScopedJoinHandle<'_, Result<_, String>>| {
            h.join().expect("thread").unwrap_or_else(|e| panic!("{e}"))
        };
        (j(blocker), j(younger), j(older))
    });
    assert!(blocker[0].seq < younger[0].seq && blocker[0].seq < older[0].seq);
    assert!(
        older[0].seq < younger[0].seq,
        "the younger request was admitted first: older {older:?}, younger {younger:?}"
    );

    // No slot leaks: every sidecar ends with nothing inside and nothing waiting.
    for tier in 0..TIERS {
        wait_for("every slot given back", || {
            chain.sidecar_metric(tier, "tailor_proxy_in_flight").is_ok_and(|v| v == 0.0)
                && chain.sidecar_metric(tier, "tailor_proxy_queue_length").is_ok_and(|v| v == 0.0)
        });
    }
    drop(chain);
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn the_orf_chain_s_first_sidecar_keeps_a_request_s_slot_until_the_chain_has_answered() {
    // The first tier's one slot is kept while the tiers behind it serve the request.
    let Some((chain, out)) = start_chain(
        "the_orf_chain_s_first_sidecar_keeps_a_request_s_slot_until_the_chain_has_answered",
        Sidecars::OrfChain,
    ) else {
        return;
    };
    let first: Uri = format!("http://{}/", chain.sidecar_addrs[0]).parse().expect("uri");
    let metric = |tier: usize, name: &str| chain.sidecar_metric(tier, name).unwrap_or_else(|e| panic!("{e}"));
    wait_for("an empty first sidecar", || metric(0, "tailor_proxy_in_flight") == 0.0);
    let t0 = now_ns();
    let ctx = |gat: u64| format!("1.g{gat}.c0.k1.h0");
    let (long, next) = std::thread::scope(|s| {
        // The long request's work is at the second tier: the first tier has called out.
        let long = s.spawn(|| chain.trace(&first, &[("tailor-context", &ctx(t0)), ("tailor-demand-us", "0,400000,0")]));
        wait_for("the long request at the second tier", || metric(1, "tailor_proxy_in_flight") == 1.0);
        assert_eq!(
            metric(0, "tailor_proxy_in_flight"),
            1.0,
            "the first sidecar gave the slot back when its service called out"
        );
        // An older request must wait at the first sidecar until the long one is answered.
        let next = s.spawn(|| chain.trace(&first, &[("tailor-context", &ctx(t0 - 1_000_000_000))]));
        wait_for("the next request waiting at the first sidecar", || metric(0, "tailor_proxy_queue_length") == 1.0);
        assert_eq!(metric(1, "tailor_proxy_in_flight"), 1.0, "the long request left the second tier early");
        let j = |h: std::thread::ScopedJoinHandle<'_, Result<_, String>>| {
            h.join().expect("thread").unwrap_or_else(|e| panic!("{e}"))
        };
        (j(long), j(next))
    });
    assert_eq!((long.len(), next.len()), (TIERS, TIERS), "{long:?} {next:?}");
    assert!(long[0].seq < next[0].seq, "the waiting request started first: long {long:?}, next {next:?}");
    for tier in 0..TIERS {
        wait_for("every slot given back", || {
            metric(tier, "tailor_proxy_in_flight") == 0.0 && metric(tier, "tailor_proxy_queue_length") == 0.0
        });
    }
    drop(chain);
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_chain_without_c_runs_each_sidecar_on_its_adaptive_limit() {
    // `c` left out: each sidecar's limit is its own (Vegas, starting at twice the CPUs it
    // may use, which a few unqueued requests do not move); a fixed `c` is reported as given.
    let Some((chain, out)) = start_chain_with(
        "a_chain_without_c_runs_each_sidecar_on_its_adaptive_limit",
        Sidecars::OrfChain,
        [None, None, Some(3)],
    ) else {
        return;
    };
    for _ in 0..20 {
        let lines = chain.trace(&chain.entry, &[("tailor-demand-us", "100,100,100")]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(lines.len(), TIERS, "{lines:?}");
    }
    let start = 2.0 * tailor_runtime::available_cpus() as f64;
    let metric =
        |tier: usize| chain.sidecar_metric(tier, "tailor_proxy_concurrency_limit").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((metric(0), metric(1), metric(2)), (start, start, 3.0), "the limits of the three sidecars");
    let conf = std::fs::read_to_string(out.join("logs/effect-orf-chain-sidecar0.toml")).expect("the first config");
    assert!(!conf.lines().any(|l| l.starts_with("c =")), "{conf}");
    assert!(conf.contains("release_on_egress = false"), "{conf}");
    drop(chain);
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn the_orf_first_chain_gates_the_whole_chain_with_its_only_sidecar() {
    // One sidecar, at the first tier, keeping a request's slot until the chain answers; the
    // services behind it call each other directly and still see the edge's GAT (they
    // forward `baggage`).
    let Some((chain, out)) =
        start_chain("the_orf_first_chain_gates_the_whole_chain_with_its_only_sidecar", Sidecars::OrfFirst)
    else {
        return;
    };
    let configs: Vec<String> = std::fs::read_dir(out.join("logs"))
        .expect("the logs")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".toml") && n.contains("sidecar"))
        .collect();
    assert_eq!(configs, ["effect-orf-first-sidecar0.toml"], "one sidecar, at the first tier");
    let conf = std::fs::read_to_string(out.join("logs/effect-orf-first-sidecar0.toml")).expect("its config");
    assert!(conf.contains("release_on_egress = false"), "{conf}");
    let lines = chain.trace(&chain.entry, &[]).unwrap_or_else(|e| panic!("{e}"));
    let ctx: Vec<_> =
        lines.iter().map(|l| l.context.unwrap_or_else(|| panic!("a tier got no context: {lines:?}"))).collect();
    assert!(lines.len() == TIERS && ctx.iter().all(|c| c.gat == ctx[0].gat), "{lines:?}");

    let first: Uri = format!("http://{}/", chain.sidecar_addrs[0]).parse().expect("uri");
    let metric = |name: &str| chain.sidecar_metric(0, name).unwrap_or_else(|e| panic!("{e}"));
    wait_for("an empty sidecar", || metric("tailor_proxy_in_flight") == 0.0);
    let t0 = now_ns();
    let ctx = |gat: u64| format!("1.g{gat}.c0.k1.h0");
    let (long, next) = std::thread::scope(|s| {
        // 400 ms of work at the second tier, behind the first service's call out.
        let long = s.spawn(|| chain.trace(&first, &[("tailor-context", &ctx(t0)), ("tailor-demand-us", "0,400000,0")]));
        wait_for("the long request inside", || metric("tailor_proxy_in_flight") == 1.0);
        // An older request waits at the sidecar for the whole chain, not for the first tier.
        let next = s.spawn(|| chain.trace(&first, &[("tailor-context", &ctx(t0 - 1_000_000_000))]));
        wait_for("the next request waiting", || metric("tailor_proxy_queue_length") == 1.0);
        let j = |h: std::thread::ScopedJoinHandle<'_, Result<_, String>>| {
            h.join().expect("thread").unwrap_or_else(|e| panic!("{e}"))
        };
        (j(long), j(next))
    });
    assert_eq!((long.len(), next.len()), (TIERS, TIERS), "{long:?} {next:?}");
    assert!(long[0].seq < next[0].seq, "the waiting request started first: long {long:?}, next {next:?}");
    assert!(long[1].seq < next[1].seq, "the waiting request reached the second tier first: {long:?} {next:?}");
    wait_for("the slot given back", || {
        metric("tailor_proxy_in_flight") == 0.0 && metric("tailor_proxy_queue_length") == 0.0
    });
    drop(chain);
    let _ = std::fs::remove_dir_all(&out);
}
