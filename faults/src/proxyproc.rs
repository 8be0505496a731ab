//! The proxy under test and its upstream as child processes of this crate's binary: their
//! configs, readiness (a port that answers), and what is read back from the proxy (its
//! `/metrics`, its descriptors and threads in `/proc`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::client;
use crate::procs::Proc;

/// Which proxy role a case runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Sidecar,
    Edge,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Sidecar => "sidecar",
            Role::Edge => "edge",
        }
    }
}

/// Runs the proxy child role: `proxy sidecar|edge --config FILE`, as `tailor proxy` does.
pub fn run_proxy(args: &[String]) -> Result<(), String> {
    let (role, config) = match args {
        [role, flag, config] if flag == "--config" => (role.as_str(), PathBuf::from(config)),
        _ => return Err("usage: proxy sidecar|edge --config FILE".into()),
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let served = match role {
        "sidecar" => rt.block_on(tailor_proxy::serve::run_sidecar(config)),
        "edge" => rt.block_on(tailor_proxy::serve::run_edge(config)),
        other => return Err(format!("unknown proxy role {other}")),
    };
    served.map_err(|e| e.to_string())
}

/// A loopback address for a proxy to listen on that nothing else takes meanwhile (the
/// shared race-free claim: a port below the ephemeral range, locked by this process).
pub use tailor_telemetry::testing::free_loopback_addr as free_port;

/// The upstream process (`upstream` role) and its address.
pub struct Upstream {
    pub proc: Proc,
    pub addr: SocketAddr,
}

impl Upstream {
    /// Starts one with `workers` workers of `service_ms` each on `listen` (`127.0.0.1:0`: any).
    pub fn start(exe: &Path, listen: &str, workers: usize, service_ms: u64) -> Upstream {
        let args = ["--listen", listen, "--workers", &workers.to_string(), "--service-ms", &service_ms.to_string()]
            .map(String::from);
        let proc = Proc::start_role(exe, "upstream", &args, &format!("upstream-{}", free_port().port()));
        let ready = proc.until("ready ", Duration::from_secs(20), |_| {});
        let addr = ready
            .and_then(|l| l.trim_start_matches("ready ").trim().parse().ok())
            .unwrap_or_else(|| panic!("the upstream did not start: {}", proc.stderr()));
        Upstream { proc, addr }
    }
}

/// A proxy process with its listen and admin addresses.
pub struct Proxy {
    pub proc: Proc,
    pub role: Role,
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    _config: TempFile,
}

/// A file removed when dropped.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Proxy {
    /// Starts `role` in front of `upstream` with `extra` config lines (top-level keys, then
    /// optionally tables such as `[limits]`) and waits until its admin `/readyz` and its listener answer.
    pub fn start(exe: &Path, role: Role, upstream: SocketAddr, extra: &str) -> Proxy {
        let (listen, admin) = (free_port(), free_port());
        let text = match role {
            Role::Sidecar => {
                format!("listen = \"{listen}\"\nupstream = \"{upstream}\"\nadmin = \"{admin}\"\n{extra}\n")
            }
            Role::Edge => format!(
                "listen = \"{listen}\"\nadmin = \"{admin}\"\nhealth_interval_ms = 100\n{extra}\n\
                 [[routes]]\nname = \"all\"\nupstreams = [\"{upstream}\"]\n"
            ),
        };
        let path = std::env::temp_dir().join(format!("tailor-faults-{}-{}.toml", std::process::id(), listen.port()));
        std::fs::write(&path, text).expect("write the proxy config");
        let args = [role.name().to_string(), "--config".into(), path.display().to_string()];
        let proc = Proc::start_role(exe, "proxy", &args, &format!("proxy-{}", listen.port()));
        let proxy = Proxy { proc, role, listen, admin, _config: TempFile(path) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while client::get_text(admin, "/readyz", Duration::from_secs(1)).is_none() {
            assert!(Instant::now() < deadline, "the {} did not start: {}", role.name(), proxy.proc.stderr());
            std::thread::sleep(Duration::from_millis(10));
        }
        proxy
    }

    /// The proxy's `/metrics` sample `name` (exact series, labels included).
    pub fn metric(&self, name: &str) -> Option<f64> {
        let text = client::get_text(self.admin, "/metrics", Duration::from_secs(5))?;
        text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }

    /// Requests waiting plus requests inside the upstream, from `/metrics`.
    pub fn slots_held(&self) -> Option<f64> {
        Some(self.metric("tailor_proxy_in_flight")? + self.metric("tailor_proxy_queue_length")?)
    }

    pub fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.proc.pid())).map_or(0, |d| d.count())
    }

    pub fn threads(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/task", self.proc.pid())).map_or(0, |d| d.count())
    }

    /// Peak and current resident memory, KiB (`VmHWM`, `VmRSS`).
    pub fn rss_kib(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.proc.pid())).unwrap_or_default();
        let field = |name: &str| {
            status.lines().find_map(|l| l.strip_prefix(name)?.split_whitespace().next()?.parse().ok()).unwrap_or(0)
        };
        (field("VmHWM:"), field("VmRSS:"))
    }
}
