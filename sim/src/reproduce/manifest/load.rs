//! Loading the manifest: reading and parsing it, and every structural problem found at once
//! (duplicate ids, unknown references, values that cannot be computed), each named by where
//! it is in the file.

use std::fmt;
use std::path::{Path, PathBuf};

use super::*;

/// Why a manifest cannot be used; every message names the file.
#[derive(Debug)]
pub enum ManifestError {
    Io { file: PathBuf, source: std::io::Error },
    Parse { file: PathBuf, message: String },
    Invalid { file: PathBuf, problems: Vec<String> },
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ManifestError::Io { file, source } => write!(
                f,
                "{}: cannot read the reproduction manifest: {source} (run from the repository root, or pass --manifest)",
                file.display()
            ),
            ManifestError::Parse { file, message } => write!(f, "{}: {}", file.display(), message.trim_end()),
            ManifestError::Invalid { file, problems } => {
                write!(f, "{}: {} problem(s):", file.display(), problems.len())?;
                for p in problems {
                    write!(f, "\n  - {p}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for ManifestError {}

/// A parsed, checked manifest and where it lives (paths in it are relative to `base_dir`).
#[derive(Clone, Debug)]
pub struct LoadedManifest {
    pub manifest: Manifest,
    pub path: PathBuf,
    pub base_dir: PathBuf,
}

impl Manifest {
    pub fn load(path: &Path) -> Result<LoadedManifest, ManifestError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ManifestError::Io { file: path.to_owned(), source })?;
        Self::from_toml(&text, path)
    }

    pub fn from_toml(text: &str, path: &Path) -> Result<LoadedManifest, ManifestError> {
        let manifest: Manifest =
            toml::from_str(text).map_err(|e| ManifestError::Parse { file: path.to_owned(), message: e.to_string() })?;
        let problems = manifest.problems();
        if !problems.is_empty() {
            return Err(ManifestError::Invalid { file: path.to_owned(), problems });
        }
        let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Ok(LoadedManifest { manifest, path: path.to_owned(), base_dir })
    }

    /// Every structural problem (scenario contents are checked when they load).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        let q = &self.quick;
        if !(q.requests_factor > 0.0 && q.requests_factor <= 1.0) {
            p.push(format!("[quick] requests_factor = {}: must be in (0, 1]", q.requests_factor));
        }
        if q.tolerance_factor.is_nan() || q.tolerance_factor < 1.0 {
            p.push(format!("[quick] tolerance_factor = {}: must be ≥ 1", q.tolerance_factor));
        }
        let mut paper_ids = std::collections::HashSet::new();
        for pa in &self.papers {
            if !paper_ids.insert(pa.id.as_str()) {
                p.push(format!("[[paper]] id = {:?} appears twice", pa.id));
            }
        }
        let mut ids = std::collections::HashSet::new();
        for f in &self.figures {
            if !ids.insert(f.id.as_str()) {
                p.push(format!("[[figure]] id = {:?} appears twice", f.id));
            }
        }
        for f in &self.figures {
            let at = format!("figure {:?}", f.id);
            if !f.id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                p.push(format!("{at}: id must be letters, digits, '-' or '_' (it names output files)"));
            }
            if !paper_ids.contains(f.paper.as_str()) {
                p.push(format!("{at}: paper = {:?} is not a [[paper]] id", f.paper));
            }
            match f.kind {
                Some(FigureKind::Planner) => {
                    if f.planner.is_none() {
                        p.push(format!("{at}: kind = \"planner\" needs a `planner` table"));
                    }
                    if let Some(pl) = &f.planner {
                        for t in &pl.tables {
                            if t.paper_ms.len() != pl.fanouts.len() {
                                p.push(format!(
                                    "{at}: table {:?} has {} paper values for {} fanouts",
                                    t.name,
                                    t.paper_ms.len(),
                                    pl.fanouts.len()
                                ));
                            }
                        }
                        if !(pl.percentile > 0.0 && pl.percentile < 100.0) {
                            p.push(format!("{at}: planner percentile = {} must be in (0, 100)", pl.percentile));
                        }
                    }
                }
                Some(FigureKind::Claims) => {
                    if f.scenario.is_some()
                        || f.planner.is_some()
                        || !f.plots.is_empty()
                        || f.vary.is_some()
                        || !f.series.is_empty()
                    {
                        p.push(format!(
                            "{at}: kind = \"claims\" has only claims (no scenario, planner, plots, vary or series)"
                        ));
                    }
                    for c in &f.claims {
                        let sels = selectors(&c.value).into_iter().chain(c.aux.values().flat_map(selectors));
                        if sels.into_iter().any(|s| s.figure.is_none()) {
                            p.push(format!(
                                "{at}, claim {:?}: in a claims-only figure every selector names its `figure`",
                                c.what
                            ));
                        }
                    }
                }
                _ => {
                    if f.scenario.is_none() {
                        p.push(format!("{at}: give `scenario` (a path relative to the manifest)"));
                    }
                    if f.planner.is_some() {
                        p.push(format!("{at}: `planner` only goes with kind = \"planner\""));
                    }
                }
            }
            let mut labels = std::collections::HashSet::new();
            for s in &f.series {
                if !labels.insert(s.label.as_str()) {
                    p.push(format!("{at}: series label {:?} appears twice", s.label));
                }
                if let Some(pol) = &s.policy {
                    if let Err(e) = pol.validate() {
                        p.push(format!("{at}, series {:?}: {e}", s.label));
                    }
                }
            }
            if let Some(v) = &f.vary {
                if v.values.is_empty() {
                    p.push(format!("{at}: vary.values is empty"));
                }
                if v.scale.is_empty() == v.truncate.is_none() {
                    p.push(format!("{at}: vary needs exactly one of `scale` and `truncate`"));
                }
                if v.truncate.is_some() && v.values.iter().any(|x| x.fract() != 0.0 || *x < 1.0) {
                    p.push(format!("{at}: vary with `truncate` needs whole values ≥ 1"));
                }
                if let Some(qv) = &f.quick_vary {
                    if qv.iter().any(|x| !v.values.contains(x)) {
                        p.push(format!("{at}: quick_vary must be a subset of vary.values"));
                    }
                }
            } else if f.quick_vary.is_some() {
                p.push(format!("{at}: quick_vary without vary"));
            }
            if f.series.iter().any(|s| s.vary_scale.is_some()) && f.vary.as_ref().is_none_or(|v| v.scale.is_empty()) {
                p.push(format!("{at}: a series' vary_scale needs the figure's vary to use `scale`"));
            }
            if let Some(k) = f.paper_load_factor {
                if !(k.is_finite() && k > 0.0) {
                    p.push(format!("{at}: paper_load_factor = {k} must be positive"));
                }
            }
            for c in &f.columns {
                if let Err(e) = parse_column(c) {
                    p.push(format!("{at}: column {c:?}: {e}"));
                }
            }
            for (i, c) in f.claims.iter().enumerate() {
                let at = format!("{at}, claim {} ({:?})", i + 1, c.what);
                if let Some(e) = &c.expect {
                    if let Err(e) = Expect::parse(e) {
                        p.push(format!("{at}: {e}"));
                    }
                }
                if c.paper.is_none() && c.paper_text.is_none() {
                    p.push(format!("{at}: give the paper's number (`paper`) or its words (`paper_text`)"));
                }
                if c.paper.is_none() && c.expect.is_none() {
                    p.push(format!("{at}: a claim without a number (`paper`) needs an `expect` to check"));
                }
                if c.ci && c.expect.is_none() {
                    p.push(format!("{at}: ci = true needs an `expect` to assert"));
                }
                check_value(&c.value, &at, &mut p);
                for (name, v) in &c.aux {
                    check_value(v, &format!("{at}, aux {name:?}"), &mut p);
                }
                for name in
                    placeholders(&c.cause).into_iter().chain(c.note.as_deref().map(placeholders).unwrap_or_default())
                {
                    if !matches!(name.as_str(), "ours" | "paper" | "ratio" | "at") && !c.aux.contains_key(&name) {
                        p.push(format!(
                            "{at}: cause uses {{{name}}}, which is neither ours/paper/ratio/at nor an `aux` name"
                        ));
                    }
                }
                for sel in selectors(&c.value).into_iter().chain(c.aux.values().flat_map(selectors)) {
                    if let Some(fig) = &sel.figure {
                        if !ids.contains(fig.as_str()) {
                            p.push(format!("{at}: selector names figure {fig:?}, which is not in the manifest"));
                        }
                    }
                }
            }
        }
        p
    }
}

fn check_value(v: &ValueSpec, at: &str, p: &mut Vec<String>) {
    let n = v.of.is_some() as u8
        + v.change.is_some() as u8
        + v.ratio.is_some() as u8
        + v.diff.is_some() as u8
        + v.max.is_some() as u8
        + v.min.is_some() as u8;
    if n != 1 {
        p.push(format!("{at}: value needs exactly one of `of`, `change`, `ratio`, `diff`, `max`, `min`"));
    }
    if v.max.as_ref().or(v.min.as_ref()).is_some_and(|l| l.is_empty()) {
        p.push(format!("{at}: `max`/`min` needs at least one value"));
    }
    for op in operands(v) {
        if let Operand::Value(inner) = op {
            check_value(inner, at, p);
        }
    }
    for s in selectors(v) {
        if matches!(s.series, SeriesRef::Many(_)) && s.pick.is_none() {
            p.push(format!("{at}: several series need `pick = \"min\"` or `\"max\"`"));
        }
    }
}
