//! The two Prometheus exposition formats a scraper may ask for, and content negotiation between them.
//!
//! `prometheus-client` encodes OpenMetrics 1.0. Prometheus servers accept it
//! when they ask for it (`Accept: application/openmetrics-text`), but the
//! classic text format 0.0.4 is what everything else reads: `promtool check
//! metrics`, `curl`, older scrapers. The two differ in a few places, all
//! handled by [`openmetrics_to_text`]: a counter family's `HELP`/`TYPE` name
//! carries the `_total` suffix in text format; `# UNIT` and `# EOF` do not
//! exist there; exemplars and `_created` samples are OpenMetrics only; and
//! `info`/`stateset`/`unknown` types become `gauge`/`gauge`/`untyped`.

/// Content type of the classic Prometheus text format.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Content type of OpenMetrics 1.0 text, what `prometheus-client` encodes.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Which format to answer a scrape with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

impl Format {
    /// Negotiates from an `Accept` header: OpenMetrics only when the scraper
    /// names it (as Prometheus servers do), text format otherwise.
    pub fn negotiate(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Text,
        }
    }

    /// The `Content-Type` header for this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => TEXT_CONTENT_TYPE,
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
        }
    }
}

/// Rewrites OpenMetrics text (as `prometheus-client` encodes it) into the
/// Prometheus text format 0.0.4.
pub fn openmetrics_to_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // HELP precedes TYPE in OpenMetrics, and a counter's HELP name changes with
    // its TYPE, so the HELP line waits for the TYPE line of its family.
    let mut pending_help: Option<(&str, String)> = None;
    // The family being read and whether it is one whose `_created` samples drop.
    let mut family: Option<(String, bool)> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            flush_help(&mut out, pending_help.take(), None);
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            pending_help = Some((name, help.replace("\\\"", "\"")));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (exposed, text_kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "stateset" => (name.to_string(), "gauge"),
                "gaugehistogram" => (name.to_string(), "histogram"),
                "unknown" => (name.to_string(), "untyped"),
                other => (name.to_string(), other),
            };
            match pending_help.take() {
                Some((help_name, help)) if help_name == name => {
                    flush_help(&mut out, Some((help_name, help)), Some(&exposed))
                }
                other => flush_help(&mut out, other, None),
            }
            out.push_str(&format!("# TYPE {exposed} {text_kind}\n"));
            family = Some((name.to_string(), matches!(kind, "counter" | "histogram" | "summary")));
        } else if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        } else if line.starts_with('#') || line.is_empty() {
            out.push_str(line);
            out.push('\n');
        } else {
            let sample = strip_exemplar(line);
            let name = sample.split(['{', ' ']).next().unwrap_or("");
            if let Some((fam, has_created)) = &family {
                if *has_created && name.strip_prefix(fam.as_str()) == Some("_created") {
                    continue;
                }
            }
            out.push_str(sample);
            out.push('\n');
        }
    }
    flush_help(&mut out, pending_help, None);
    out
}

fn flush_help(out: &mut String, help: Option<(&str, String)>, renamed: Option<&str>) {
    if let Some((name, text)) = help {
        let name = renamed.unwrap_or(name);
        out.push_str(&format!("# HELP {name} {text}\n"));
    }
}

/// A sample line without its exemplar (`value # {labels} value`): the first
/// ` # ` outside a quoted label value.
fn strip_exemplar(line: &str) -> &str {
    let bytes = line.as_bytes();
    let mut in_quotes = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_quotes => i += 1,
            b'"' => in_quotes = !in_quotes,
            b'#' if !in_quotes && i > 0 && bytes[i - 1] == b' ' => return line[..i - 1].trim_end(),
            _ => {}
        }
        i += 1;
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_family_names_carry_total_in_text_format() {
        let om = "# HELP tailor_jobs Jobs admitted.\n# TYPE tailor_jobs counter\ntailor_jobs_total 3\n# EOF\n";
        assert_eq!(
            openmetrics_to_text(om),
            "# HELP tailor_jobs_total Jobs admitted.\n# TYPE tailor_jobs_total counter\ntailor_jobs_total 3\n"
        );
    }

    #[test]
    fn units_eof_exemplars_and_created_samples_are_dropped() {
        let om = "# HELP t_seconds Latency.\n# TYPE t_seconds histogram\n# UNIT t_seconds seconds\n\
                  t_seconds_bucket{le=\"1.0\"} 1 # {trace=\"a # b\"} 0.5\nt_seconds_bucket{le=\"+Inf\"} 1\n\
                  t_seconds_sum 0.5\nt_seconds_count 1\nt_seconds_created 1.7e9\n# EOF\n";
        let text = openmetrics_to_text(om);
        assert!(!text.contains("UNIT") && !text.contains("EOF") && !text.contains("created"), "{text}");
        assert!(text.contains("t_seconds_bucket{le=\"1.0\"} 1\n"), "{text}");
    }

    #[test]
    fn quotes_in_label_values_do_not_end_a_sample() {
        assert_eq!(strip_exemplar("m{a=\"x # y\"} 2"), "m{a=\"x # y\"} 2");
        assert_eq!(strip_exemplar("m{a=\"q\\\"\"} 2 # {t=\"1\"} 1"), "m{a=\"q\\\"\"} 2");
    }

    #[test]
    fn negotiation_prefers_text_unless_openmetrics_is_named() {
        assert_eq!(Format::negotiate(None), Format::Text);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Text);
        let prometheus = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
        assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
    }
}
