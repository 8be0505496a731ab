//! Tests for `dist`: sampling against the analytic moments and CDFs (oracles),
//! the real tailbench tables, config parsing and error messages.

use std::path::{Path, PathBuf};

use super::*;
use crate::rng::Rng;
use crate::time::NANOS_PER_MILLI;

const MS: f64 = NANOS_PER_MILLI as f64;

/// The tailbench tables, wherever the workspace is checked out.
fn tailbench_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/tailbench")
}

fn build(toml_text: &str) -> Result<Dist, DistError> {
    #[derive(Deserialize)]
    struct Doc {
        d: DistSpec,
    }
    let doc: Doc = toml::from_str(toml_text).expect("test TOML parses");
    doc.d.build(&tailbench_dir())
}

/// Sample mean and variance of `n` draws.
fn moments(d: &Dist, seed: u64, n: usize) -> (f64, f64) {
    let mut rng = Rng::new(seed);
    let (mut s1, mut s2) = (0.0f64, 0.0f64);
    for _ in 0..n {
        let x = d.sample_ns(&mut rng) as f64;
        s1 += x;
        s2 += x * x;
    }
    let mean = s1 / n as f64;
    (mean, s2 / n as f64 - mean * mean)
}

/// Checks the sample mean against the analytic one within 5 standard errors
/// (SE = sd/√n; a 5-SE miss has probability < 10⁻⁶ for a normal sample mean).
fn assert_mean_within_5se(d: &Dist, n: usize, what: &str) {
    let (mean, _) = moments(d, 42, n);
    let se = d.variance_ns2().unwrap().sqrt() / (n as f64).sqrt();
    let want = d.mean_ns();
    assert!((mean - want).abs() < 5.0 * se + 0.5, "{what}: sample mean {mean} vs {want} (SE {se})");
}

#[test]
fn parses_every_kind_from_toml_and_rejects_unknown_keys() {
    for text in [
        "d = { kind = \"fixed\", value_ms = 5 }",
        "d = { kind = \"exp\", mean_ms = 10.0 }",
        "d = { kind = \"lognormal\", mean_ms = 10, sd_ms = 100 }",
        "d = { kind = \"pareto\", mean_ms = 1, alpha = 1.5 }",
        "d = { kind = \"uniform\", min_ms = 1, max_ms = 2 }",
        "d = { kind = \"mixture\", parts = [ { weight = 1, dist = { kind = \"fixed\", value_ms = 5 } } ] }",
        "d = { kind = \"empirical\", file = \"Mastree_cdf\" }",
        "d = { kind = \"empirical\", file = \"Mastree_cdf\", scale = 2.0 }",
    ] {
        build(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    }
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Doc {
        d: DistSpec,
    }
    for text in [
        "d = { kind = \"exp\", mean_ms = 1, mean_us = 3 }",
        "d = { kind = \"exp\", mean = 1 }",
        "d = { kind = \"gamma\", mean_ms = 1 }",
        "d = { kind = \"mixture\", parts = [ { weight = 1, dist = { kind = \"fixed\", value_ms = 5 }, extra = 1 } ] }",
    ] {
        assert!(toml::from_str::<Doc>(text).is_err(), "accepted: {text}");
    }
}

#[test]
fn invalid_parameters_name_the_field_and_the_fix() {
    let e = build("d = { kind = \"exp\", mean_ms = -1 }").unwrap_err().to_string();
    assert!(e.contains("mean_ms = -1") && e.contains("> 0"), "{e}");
    let e = build("d = { kind = \"pareto\", mean_ms = 1, alpha = 1 }").unwrap_err().to_string();
    assert!(e.contains("alpha = 1") && e.contains("> 1"), "{e}");
    let e = build("d = { kind = \"uniform\", min_ms = 2, max_ms = 1 }").unwrap_err().to_string();
    assert!(e.contains("max_ms") && e.contains("greater than min_ms"), "{e}");
    let e = build(
        "d = { kind = \"mixture\", parts = [ { weight = 1, dist = { kind = \"fixed\", value_ms = 1 } },
                                               { weight = 1, dist = { kind = \"lognormal\", mean_ms = 1, sd_ms = 0 } } ] }",
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("parts[1].dist.sd_ms = 0"), "{e}");
    let e = build("d = { kind = \"mixture\", parts = [ { weight = 0, dist = { kind = \"fixed\", value_ms = 1 } } ] }")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("parts[0].weight = 0"), "{e}");
    let e = build("d = { kind = \"mixture\", parts = [] }").unwrap_err().to_string();
    assert!(e.starts_with("parts: a mixture needs at least one part"), "{e}");
    let e = build("d = { kind = \"empirical\", file = \"no_such_table\" }").unwrap_err().to_string();
    assert!(e.contains("file: cannot read table") && e.contains("no_such_table"), "{e}");
}

#[test]
fn exponential_uniform_fixed_moments() {
    let n = 400_000;
    assert_mean_within_5se(&Dist::exp_ns(10.0 * MS), n, "exp");
    assert_mean_within_5se(&Dist::uniform_ns(1.0 * MS, 3.0 * MS), n, "uniform");
    let f = Dist::fixed_ns(5.0 * MS);
    assert_eq!(moments(&f, 1, 10), (5.0 * MS, 0.0));
    // Variance of the exponential: the sample variance of n draws has
    // SE ≈ √((μ4 − σ⁴)/n) = σ²·√(8/n) (μ4 = 9σ⁴); 5 SE.
    let (_, var) = moments(&Dist::exp_ns(MS), 7, n);
    assert!((var / (MS * MS) - 1.0).abs() < 5.0 * (8.0 / n as f64).sqrt(), "{var}");
}

#[test]
fn lognormal_is_parametrised_by_its_own_mean_and_sd() {
    let d = build("d = { kind = \"lognormal\", mean_ms = 10, sd_ms = 100 }").unwrap();
    assert_eq!(d.mean_ns(), 10.0 * MS);
    assert_eq!(d.variance_ns2(), Some(1e4 * MS * MS));
    // sd/mean = 10 makes the sample mean converge slowly and skewed, so use
    // many draws: SE = 100 ms/√(2·10⁶) = 0.07 ms; 5 SE = 0.35 ms (3.5%).
    assert_mean_within_5se(&d, 2_000_000, "lognormal(10, 100)");
    // The median is e^μ = mean/√(1 + sd²/mean²) = 10/√101 ms.
    let median = 10.0 * MS / 101f64.sqrt();
    assert!((d.quantile_f64(0.5) / median - 1.0).abs() < 1e-12);
    assert!((d.cdf_f64(median) - 0.5).abs() < 1e-14);
    // A modest lognormal, where the sample variance is a usable oracle:
    // sd/mean = 0.5; fourth moment finite, SE of the variance ≈ 0.6% at 4·10⁵; 5 SE.
    let d = Dist::lognormal_ns(MS, 0.5 * MS);
    let (mean, var) = moments(&d, 3, 400_000);
    assert!((mean / MS - 1.0).abs() < 5.0 * 0.5 / 400_000f64.sqrt(), "{mean}");
    assert!((var / (0.25 * MS * MS) - 1.0).abs() < 0.03, "{var}");
}

#[test]
fn pareto_mean_and_infinite_variance() {
    let d = build("d = { kind = \"pareto\", mean_ms = 1, alpha = 1.5 }").unwrap();
    assert!((d.mean_ns() - MS).abs() < 1e-9);
    assert_eq!(d.variance_ns2(), None);
    // α = 3: variance x_m²·α/((α−1)²(α−2)) with x_m = 2/3 ms → 1/3 ms².
    let d = Dist::pareto_ns(MS, 3.0);
    assert!((d.variance_ns2().unwrap() / (MS * MS) - 1.0 / 3.0).abs() < 1e-12);
    // Its fourth moment is infinite, so check the mean only (SE from the variance).
    assert_mean_within_5se(&d, 400_000, "pareto(1, 3)");
    assert!((d.cdf_f64(d.quantile_f64(0.99)) - 0.99).abs() < 1e-12);
}

#[test]
fn trimodal_and_bimodal_mixtures() {
    let tri = build(
        "d = { kind = \"mixture\", parts = [
            { weight = 0.90, dist = { kind = \"fixed\", value_ms = 5 } },
            { weight = 0.09, dist = { kind = \"fixed\", value_ms = 50 } },
            { weight = 0.01, dist = { kind = \"fixed\", value_ms = 100 } } ] }",
    )
    .unwrap();
    assert!((tri.mean_ns() - 10.0 * MS).abs() < 1e-6);
    // E[X²] = .9·25 + .09·2500 + .01·10⁴ = 347.5 ms² → Var = 247.5 ms².
    assert!((tri.variance_ns2().unwrap() / (MS * MS) - 247.5).abs() < 1e-9);
    assert_mean_within_5se(&tri, 400_000, "trimodal");
    assert_eq!(tri.quantile(0.5), 5 * NANOS_PER_MILLI);
    assert_eq!(tri.quantile(0.95), 50 * NANOS_PER_MILLI);
    assert_eq!(tri.quantile(0.995), 100 * NANOS_PER_MILLI);
    assert!((tri.cdf_f64(49.0 * MS) - 0.9).abs() < 1e-12);

    let bi = build(
        "d = { kind = \"mixture\", parts = [
            { weight = 99, dist = { kind = \"exp\", mean_ms = 4 } },
            { weight = 1, dist = { kind = \"exp\", mean_ms = 100 } } ] }",
    )
    .unwrap();
    assert!((bi.mean_ns() - 4.96 * MS).abs() < 1e-6);
    assert_mean_within_5se(&bi, 400_000, "bimodal");
    // Mixture quantile by bisection inverts the mixture CDF.
    for p in [0.5, 0.9, 0.99, 0.999] {
        let q = bi.quantile_f64(p);
        assert!((bi.cdf_f64(q) - p).abs() < 1e-9, "p = {p}: q = {q}");
    }
}

#[test]
fn empirical_sample_fractions_match_the_exact_cdf() {
    let d = build("d = { kind = \"empirical\", file = \"Mastree_cdf\" }").unwrap();
    let n = 2_000_000;
    let mut rng = Rng::new(9);
    let mut xs: Vec<Nanos> = (0..n).map(|_| d.sample_ns(&mut rng)).collect();
    xs.sort_unstable();
    // The fraction of draws ≤ x estimates F(x) with SE √(F(1−F)/n); 5 SE
    // (+ F's change over the ½ ns lost to rounding, negligible here).
    for p in [0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 0.99995] {
        let x = d.quantile(p);
        let f = d.cdf(x);
        let frac = xs.partition_point(|&v| v <= x) as f64 / n as f64;
        let se = (f * (1.0 - f) / n as f64).sqrt();
        assert!((frac - f).abs() < 5.0 * se + 1e-6, "p = {p}: x = {x}, F = {f}, sample {frac}");
    }
}

#[test]
fn tailbench_tables_have_the_readme_means_and_sampling_reproduces_them() {
    for (file, mean_ms) in [("Mastree_cdf", 0.176), ("Shore_cdf", 0.341), ("Xapian_cdf", 0.925)] {
        let d = build(&format!("d = {{ kind = \"empirical\", file = \"{file}\" }}")).unwrap();
        let got = d.mean_ns() / MS;
        assert!((got / mean_ms - 1.0).abs() < 0.01, "{file}: mean {got} ms, README {mean_ms}");
        assert_mean_within_5se(&d, 1_000_000, file);
        // scale multiplies every value.
        let d2 = build(&format!("d = {{ kind = \"empirical\", file = \"{file}\", scale = 2 }}")).unwrap();
        assert!((d2.mean_ns() / d.mean_ns() - 2.0).abs() < 1e-12);
    }
}

#[test]
fn bad_tables_name_the_file_and_line() {
    let dir = std::env::temp_dir().join(format!("tailor-dist-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good: Vec<String> = (0..TABLE_LEN).map(|i| format!("{}", 0.1 + i as f64 * 1e-5)).collect();
    let write = |name: &str, lines: &[String]| {
        std::fs::write(dir.join(name), lines.join("\n") + "\n").unwrap();
    };
    write("good", &good);
    let mut unsorted = good.clone();
    unsorted[500] = "0.05".into();
    write("unsorted", &unsorted);
    write("short", &good[..9999]);
    let mut nan = good.clone();
    nan[41] = "NaN".into();
    write("nan", &nan);
    let mut text = good.clone();
    text[7] = "0.1 ms".into();
    write("text", &text);
    let mut neg = good.clone();
    neg[0] = "-0.1".into();
    write("neg", &neg);

    let spec = |f: &str| DistSpec::Empirical { file: f.into(), scale: 1.0 };
    assert!(spec("good").build(&dir).is_ok());
    let err = |f: &str| spec(f).build(&dir).unwrap_err().to_string();
    let e = err("unsorted");
    assert!(e.contains("unsorted:501:") && e.contains("sorted ascending"), "{e}");
    let e = err("short");
    assert!(e.contains("short: has 9999 lines, expected 10000"), "{e}");
    let e = err("nan");
    assert!(e.contains("nan:42: value NaN is NaN"), "{e}");
    let e = err("text");
    assert!(e.contains("text:8: `0.1 ms` is not a number"), "{e}");
    let e = err("neg");
    assert!(e.contains("neg:1: value -0.1 is negative"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn cdf_and_quantile_agree_for_every_kind() {
    let dists = [
        Dist::exp_ns(MS),
        Dist::lognormal_ns(MS, 3.0 * MS),
        Dist::pareto_ns(MS, 2.5),
        Dist::uniform_ns(MS, 2.0 * MS),
        Dist::mixture(vec![(1.0, Dist::exp_ns(MS)), (1.0, Dist::uniform_ns(0.0, 5.0 * MS))]),
        build("d = { kind = \"empirical\", file = \"Xapian_cdf\" }").unwrap(),
    ];
    for d in &dists {
        for p in [0.01, 0.25, 0.5, 0.9, 0.99, 0.9999] {
            let q = d.quantile(p);
            // Rounded up to whole ns, so F(q) ≥ p and F(q − 1) < p (up to f64 rounding).
            assert!(d.cdf(q) >= p - 1e-12, "{d:?} p = {p}: F({q}) = {}", d.cdf(q));
            assert!(d.cdf(q - 1) < p + 1e-12, "{d:?} p = {p}: F({}) = {}", q - 1, d.cdf(q - 1));
        }
        assert_eq!(d.quantile(1.0), if matches!(d.kind, Kind::Uniform { .. }) { 2 * NANOS_PER_MILLI } else { NEVER });
    }
}

/// A generated scenario writes a config's distribution back as TOML: every
/// kind must parse back to the same spec, with times stretched by `scaled`.
#[test]
fn a_spec_written_as_inline_toml_parses_back_to_itself_scaled() {
    #[derive(Deserialize)]
    struct Doc {
        d: DistSpec,
    }
    let specs = [
        "{ kind = \"fixed\", value_ms = 2.5 }",
        "{ kind = \"exp\", mean_ms = 0.1 }",
        "{ kind = \"lognormal\", mean_ms = 10, sd_ms = 100 }",
        "{ kind = \"pareto\", mean_ms = 3, alpha = 1.5 }",
        "{ kind = \"uniform\", min_ms = 1, max_ms = 4 }",
        "{ kind = \"mixture\", parts = [{ weight = 0.97, dist = { kind = \"exp\", mean_ms = 1 } }, \
           { weight = 0.03, dist = { kind = \"mixture\", parts = [{ weight = 1, dist = { kind = \"fixed\", value_ms = 4 } }] } }] }",
        "{ kind = \"empirical\", file = \"dir with \\\"quotes\\\"\\\\and\\\\backslashes/Mastree_cdf\", scale = 2 }",
    ];
    for text in specs {
        let spec = toml::from_str::<Doc>(&format!("d = {text}")).unwrap_or_else(|e| panic!("{text}: {e}")).d;
        let scaled = spec.scaled(5.0);
        let back = toml::from_str::<Doc>(&format!("d = {}", scaled.to_inline_toml()))
            .unwrap_or_else(|e| panic!("{}: {e}", scaled.to_inline_toml()))
            .d;
        assert_eq!(back, scaled, "{text}");
        assert_ne!(scaled, spec, "{text}: scaling by 5 changes a time");
    }
    // Times scale, shapes do not: a Pareto's α and a mixture's weights stay.
    let p = DistSpec::Pareto { mean_ms: 3.0, alpha: 1.5 }.scaled(2.0);
    assert_eq!(p, DistSpec::Pareto { mean_ms: 6.0, alpha: 1.5 });
    let mixture = "{ kind = \"mixture\", parts = [{ weight = 0.97, dist = { kind = \"exp\", mean_ms = 1 } }, \
                   { weight = 0.03, dist = { kind = \"exp\", mean_ms = 4 } }] }";
    let m = build(&format!("d = {mixture}")).unwrap();
    let doc: Doc = toml::from_str(&format!("d = {mixture}")).unwrap();
    let m5 = doc.d.scaled(5.0).build(Path::new(".")).unwrap();
    assert!((m5.mean_ns() / m.mean_ns() - 5.0).abs() < 1e-9, "the mean scales with the times");
}
