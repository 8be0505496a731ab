//! Tests of the handler's server choice and its learned CDFs.

use super::*;
use tailor_core::dist::{Dist, Scaled};

fn handler(min_samples: f64) -> Arc<Handler> {
    Handler::new(HandlerConfig {
        scheme: Scheme::TfEdfq,
        queuing: Queuing::AtServers,
        classes: vec![SloClass { p: 0.99, slo_ns: 100_000_000 }],
        // Never contacted: the test feeds results to the histograms directly.
        servers: (0..4).map(|i| SocketAddr::from(([127, 0, 0, 1], 9 + i))).collect(),
        server_weights: Vec::new(),
        class_server_weights: Vec::new(),
        offline: Arc::new(Scaled { dist: Dist::fixed_ns(10e6), factor: 1.0 }),
        offline_per_server: Vec::new(),
        admission: None,
        refresh: Duration::from_millis(250),
        min_samples,
        seed: 1,
        query_timeout_slos: None,
    })
    .unwrap()
}

/// A class with its own placement picks by it; the others by the default.
#[test]
fn each_class_picks_its_servers_by_its_own_placement() {
    let mut cfg = handler(1000.0).cfg.clone();
    cfg.classes.push(SloClass { p: 0.99, slo_ns: 200_000_000 });
    // Class 0: server 0 three times as likely as each other one (3 of 6); class 1 uniform.
    cfg.class_server_weights = vec![vec![3.0, 1.0, 1.0, 1.0], Vec::new()];
    let h = Handler::new(cfg.clone()).unwrap();
    let share_on_0 = |class: u8| {
        let hits = (0..20_000).filter(|_| h.pick_servers(class, 1, None)[0] == 0).count();
        hits as f64 / 20_000.0
    };
    let (a, b) = (share_on_0(0), share_on_0(1));
    assert!((a - 0.5).abs() < 0.02, "class 0 on server 0: {a}");
    assert!((b - 0.25).abs() < 0.02, "class 1 on server 0: {b}");
    // Distinct servers still: a fan-out of 4 gets all four.
    let mut all = h.pick_servers(0, 4, None);
    all.sort_unstable();
    assert_eq!(all, vec![0, 1, 2, 3]);
    cfg.class_server_weights = vec![vec![1.0; 3], Vec::new()];
    let err = Handler::new(cfg).err().expect("3 weights for 4 servers").to_string();
    assert!(err.contains("class_server_weights[0] has 3 entries for 4 servers"), "{err}");
}

/// Each bad setting is refused with the variant that names its field.
#[test]
fn a_bad_handler_config_names_the_field() {
    let good = handler(1000.0).cfg.clone();
    let refused = |change: &dyn Fn(&mut HandlerConfig)| {
        let mut cfg = good.clone();
        change(&mut cfg);
        match Handler::new(cfg) {
            Err(crate::Error::Handler(e)) => e,
            Err(other) => panic!("expected a HandlerConfigError, got {other:?}"),
            Ok(_) => panic!("accepted"),
        }
    };
    let e = refused(&|c| c.servers.clear());
    assert!(matches!(e, HandlerConfigError::NoServers), "{e:?}");
    let e = refused(&|c| c.server_weights = vec![1.0; 3]);
    assert!(
        matches!(&e, HandlerConfigError::PerServerCount { field, entries: 3, servers: 4 } if field == "server_weights"),
        "{e:?}"
    );
    let e = refused(&|c| c.server_weights = vec![1.0, 1.0, f64::NAN, 1.0]);
    assert!(
        matches!(&e, HandlerConfigError::BadWeight { field, weight } if field == "server_weights" && weight.is_nan())
    );
    let e = refused(&|c| c.class_server_weights = vec![Vec::new(), Vec::new()]);
    assert!(matches!(e, HandlerConfigError::PerClassCount { entries: 2, classes: 1 }), "{e:?}");
    let e = refused(&|c| c.class_server_weights = vec![vec![1.0, 0.0, 1.0, 1.0]]);
    assert!(
        matches!(&e, HandlerConfigError::BadWeight { field, weight } if field == "class_server_weights[0]" && *weight == 0.0),
        "{e:?}"
    );
    let e = refused(&|c| {
        c.admission = Some(AdmissionConfig {
            r_th: 2.0,
            window: AdmissionWindow::Outcomes(100),
            predict: false,
            proportional: false,
            per_server: false,
            reject_late: false,
        })
    });
    assert!(matches!(e, HandlerConfigError::Admission(_)), "{e:?}");
    assert!(e.to_string().starts_with("admission: r_th = 2"), "{e}");
    assert!(matches!(Scheme::parse("TailGuard"), Ok(Scheme::TfEdfq)));
    let e = Scheme::parse("edf").unwrap_err();
    assert!(matches!(&e, HandlerConfigError::UnknownScheme { name } if name == "edf"), "{e:?}");
    assert_eq!(e.to_string(), "scheme `edf`: expected tf-edfq, t-edfq, priq or fifo");
}

/// A query's seed fixes its servers, whatever the handler's own stream
/// did before: the same seeded queries land on the same servers under
/// every scheme. Different seeds still spread over the servers.
#[test]
fn a_seeded_query_picks_the_same_servers_on_every_handler() {
    let a = handler(1000.0);
    let b = handler(1000.0);
    // Move b's own stream: unseeded picks must not shift seeded ones.
    for _ in 0..7 {
        b.pick_servers(0, 3, None);
    }
    let picks: Vec<Vec<usize>> = (0..200u64).map(|q| a.pick_servers(0, 2, Some(q))).collect();
    for (q, want) in picks.iter().enumerate() {
        assert_eq!(&b.pick_servers(0, 2, Some(q as u64)), want, "seed {q}");
    }
    let mut seen = [0u32; 4];
    for p in &picks {
        assert_ne!(p[0], p[1], "distinct servers");
        for &s in p {
            seen[s] += 1;
        }
    }
    // 400 picks over 4 servers: each near 100 (binomial sd ≈ 8.7).
    assert!(seen.iter().all(|&c| (60..=140).contains(&c)), "{seen:?}");
}

fn feed(h: &Handler, server: usize, n: usize, ns: Nanos) {
    let mut hist = h.learned[server].lock().unwrap();
    for _ in 0..n {
        hist.record(ns);
    }
}

fn near(got: Nanos, want_ms: f64) -> bool {
    (got as f64 / 1e6 / want_ms - 1.0).abs() < 0.05
}

/// §III.B.2: results replace the offline CDF, first through the pool of every
/// server's samples, then per server, and a histogram's memory is counted in
/// samples (halved at twice the threshold), not in refreshes.
#[test]
fn learned_cdfs_replace_the_offline_one_pooled_first_then_per_server() {
    let h = handler(1000.0);
    h.refresh_planner();
    assert!(near(h.unloaded_tail(0, 1), 10.0), "offline: {}", h.unloaded_tail(0, 1));
    assert_eq!(h.stats.servers_on_pooled_cdf.load(Ordering::Relaxed), 0);

    // 300 results of 20 ms per server: none has 1000 of its own, the pool has 1200.
    for s in 0..4 {
        feed(&h, s, 300, 20_000_000);
    }
    h.refresh_planner();
    assert!(near(h.unloaded_tail(0, 1), 20.0), "pooled: {}", h.unloaded_tail(0, 1));
    assert_eq!(h.stats.servers_on_own_cdf.load(Ordering::Relaxed), 0);
    assert_eq!(h.stats.servers_on_pooled_cdf.load(Ordering::Relaxed), 4);
    assert!(near(h.expected_wait(2, 2), 30.0), "pooled mean: {}", h.expected_wait(2, 2));
    // Refreshing again forgets nothing below twice the threshold.
    h.refresh_planner();
    assert_eq!(h.learned[0].lock().unwrap().count(), 300.0);

    // Server 0 slows down to 40 ms and learns its own CDF: a query on all four
    // servers now waits for it.
    feed(&h, 0, 1000, 40_000_000);
    h.refresh_planner();
    assert_eq!(h.stats.servers_on_own_cdf.load(Ordering::Relaxed), 1);
    assert_eq!(h.stats.servers_on_pooled_cdf.load(Ordering::Relaxed), 3);
    assert!(near(h.unloaded_tail(0, 4), 40.0), "per server: {}", h.unloaded_tail(0, 4));
    assert!(h.expected_wait(0, 2) > h.expected_wait(1, 2));

    // At twice the threshold a histogram is halved after the refresh.
    feed(&h, 1, 1700, 20_000_000);
    h.refresh_planner();
    assert_eq!(h.learned[1].lock().unwrap().count(), 1000.0);
    assert_eq!(h.stats.servers_on_own_cdf.load(Ordering::Relaxed), 2);
}

#[test]
fn tail_samples_cover_the_quantile_the_largest_fan_out_needs() {
    let c = [SloClass { p: 0.99, slo_ns: 1 }, SloClass { p: 0.95, slo_ns: 1 }];
    let k100 = Handler::tail_samples(&c, 100);
    assert!((99_000.0..100_500.0).contains(&k100), "{k100}");
    let k1 = Handler::tail_samples(&c, 1);
    assert!((999.0..1001.0).contains(&k1), "{k1}");
    assert!(Handler::tail_samples(&c, 32) < k100);
}
