//! How `tailor` shows a long run's progress: a bar with an ETA on a terminal, plain
//! `[done/total]` lines with elapsed time and ETA when stderr is a pipe or a file (CI logs).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tailor_core::Progress;

/// The [`Progress`] every long-running `tailor` command hands its library.
pub struct Reporter {
    bar: Option<ProgressBar>,
    total: AtomicU64,
    phase: Mutex<(String, Instant)>,
}

impl Reporter {
    /// A bar when stderr is a terminal, plain lines otherwise.
    pub fn new() -> Reporter {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {elapsed_precise} ETA {eta} {wide_msg}")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            bar.enable_steady_tick(Duration::from_millis(500));
            bar
        });
        Reporter { bar, total: AtomicU64::new(0), phase: Mutex::new((String::new(), Instant::now())) }
    }
}

impl Default for Reporter {
    fn default() -> Reporter {
        Reporter::new()
    }
}

impl Progress for Reporter {
    fn start(&self, total: u64, phase: &str) {
        self.total.store(total, Ordering::Relaxed);
        *self.phase.lock().unwrap() = (phase.to_string(), Instant::now());
        match &self.bar {
            Some(bar) => {
                bar.reset();
                bar.set_length(total);
                bar.set_prefix(phase.to_string());
            }
            None => eprintln!("{phase}: 0/{total}"),
        }
    }

    fn advance(&self, done: u64, label: &str) {
        match &self.bar {
            Some(bar) => {
                bar.set_position(done);
                bar.set_message(label.to_string());
            }
            None => {
                let total = self.total.load(Ordering::Relaxed);
                let (phase, started) = self.phase.lock().unwrap().clone();
                let elapsed = started.elapsed().as_secs_f64();
                let eta = if done > 0 && total >= done {
                    format!("ETA {:.0} s", elapsed / done as f64 * (total - done) as f64)
                } else {
                    "ETA ?".into()
                };
                eprintln!("{phase}: [{done}/{total}] {label} ({elapsed:.0} s elapsed, {eta})");
            }
        }
    }

    fn line(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
