//! The handler's configuration: the scheme, where tasks wait, admission control's settings.

use super::*;

/// Which deadline the tasks carry and how task queues order them (TailGuard §III.A).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scheme {
    /// EDF on t0 + SLO − x_p^u(k_f): TailGuard.
    TfEdfq,
    /// EDF on t0 + SLO.
    TEdfq,
    /// Strict class priority, FIFO within a class.
    Priq,
    /// First in, first out.
    Fifo,
}

impl Scheme {
    pub const ALL: [Scheme; 4] = [Scheme::TfEdfq, Scheme::TEdfq, Scheme::Priq, Scheme::Fifo];

    pub fn name(self) -> &'static str {
        match self {
            Scheme::TfEdfq => "TF-EDFQ",
            Scheme::TEdfq => "T-EDFQ",
            Scheme::Priq => "PRIQ",
            Scheme::Fifo => "FIFO",
        }
    }

    /// The core policy a task queue runs for this scheme.
    pub fn queue_policy(self) -> PolicySpec {
        match self {
            Scheme::TfEdfq | Scheme::TEdfq => PolicySpec::Edf,
            Scheme::Priq => PolicySpec::Priq,
            Scheme::Fifo => PolicySpec::Fifo,
        }
    }

    pub fn parse(s: &str) -> Result<Scheme, HandlerConfigError> {
        match s.to_ascii_lowercase().as_str() {
            "tf-edfq" | "tailguard" => Ok(Scheme::TfEdfq),
            "t-edfq" => Ok(Scheme::TEdfq),
            "priq" => Ok(Scheme::Priq),
            "fifo" => Ok(Scheme::Fifo),
            _ => Err(HandlerConfigError::UnknownScheme { name: s.to_string() }),
        }
    }
}

/// Why a handler cannot be built from its configuration; every variant names the field.
#[derive(Debug, thiserror::Error)]
pub enum HandlerConfigError {
    /// The scheme names one of [`Scheme::ALL`].
    #[error("scheme `{name}`: expected tf-edfq, t-edfq, priq or fifo")]
    UnknownScheme { name: String },
    /// A handler fans out to at least one task server.
    #[error("the handler needs at least one task server")]
    NoServers,
    /// A per-server list (`server_weights`, `offline_per_server`, `class_server_weights[c]`)
    /// has one entry per task server, or none.
    #[error("{field} has {entries} entries for {servers} servers")]
    PerServerCount { field: String, entries: usize, servers: usize },
    /// `class_server_weights` has one placement per class, or none.
    #[error("class_server_weights has {entries} entries for {classes} classes")]
    PerClassCount { entries: usize, classes: usize },
    /// Placement weights are relative shares: positive and finite.
    #[error("{field}: {weight} is not a positive weight")]
    BadWeight { field: String, weight: f64 },
    /// The classes' SLOs cannot be planned (TailGuard's planner).
    #[error(transparent)]
    Planner(#[from] PlannerError),
    /// Admission control's R_th or window is out of range.
    #[error("admission: {0}")]
    Admission(#[source] AdmissionError),
    /// The scheme's queue policy cannot be built for a central queue.
    #[error(transparent)]
    QueuePolicy(#[from] PolicyError),
}

/// Where tasks wait (TailGuard Fig. 2 allows both).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Queuing {
    /// Tasks go to the servers at once and queue there.
    AtServers,
    /// One queue per server in the handler; a task is released when its server is free.
    Central,
}

/// Admission control settings.
#[derive(Clone, Copy, Debug)]
pub struct AdmissionConfig {
    pub r_th: f64,
    /// Which outcomes the ratio is over: the last N task outcomes (TailGuard §IV.D: 100,000,
    /// 1,000 queries of fanout 100; a rejected query's tasks move it too), those of a time
    /// window (§III.C), or both, whichever holds fewer (`tailor-fanout handler`'s default:
    /// 100,000 within 1 s). Core's [`AdmissionWindow`].
    pub window: AdmissionWindow,
    /// Count a task as missed when it is dispatched if the work queued ahead of
    /// it at its server already overruns its deadline, instead of when the miss
    /// is observed (at the deadline with central queuing, with the result at
    /// the servers). See [`Handler::expected_wait`]. Off: the paper's rule.
    pub predict: bool,
    /// Admit the share R_th / ratio of queries while the ratio exceeds R_th,
    /// instead of none (core's `AdmissionController::with_proportional`).
    pub proportional: bool,
    /// One miss ratio per server instead of one for the handler: a query is rejected
    /// while any server it picked misses more than R_th of its tasks. With servers
    /// loaded unevenly (a placement, slower servers) the global ratio is an average
    /// over cool and hot servers, and the hot ones overrun before it moves.
    pub per_server: bool,
    /// Also reject a query at once when one of its tasks would wait past its deadline at
    /// the server it picked: the work queued ahead of the task there (in the queue's
    /// order), at the query class's SLO percentile, overruns its budget. The ratio reacts
    /// to misses after a window of them; this turns away only the queries that meet a
    /// long queue, when they meet it. See [`Handler::wait_quantile`].
    pub reject_late: bool,
}

/// Everything a handler needs.
#[derive(Clone)]
pub struct HandlerConfig {
    pub scheme: Scheme,
    pub queuing: Queuing,
    pub classes: Vec<SloClass>,
    pub servers: Vec<SocketAddr>,
    /// Relative chance of each server being picked (empty: uniform).
    pub server_weights: Vec<f64>,
    /// Per class, its own placement: each server's relative chance for that
    /// class's queries (empty, or an empty entry: `server_weights`). TailGuard's
    /// testbed sent 80% of class A to one cluster.
    pub class_server_weights: Vec<Vec<f64>>,
    /// The offline estimate of every server's post-dequeue time CDF.
    pub offline: SharedCdf,
    /// Per server, an offline estimate of its own (heterogeneous servers whose
    /// speeds are known); empty: `offline` for every server.
    pub offline_per_server: Vec<SharedCdf>,
    pub admission: Option<AdmissionConfig>,
    /// How often the planner is rebuilt from the learned CDFs.
    pub refresh: Duration,
    /// Samples a learned CDF (a server's own, or the pool of all servers') needs
    /// before it replaces the offline CDF; see [`Handler::tail_samples`].
    pub min_samples: f64,
    pub seed: u64,
    /// A query whose tasks are not all back within this many times its SLO ends with
    /// [`QueryError::Timeout`] naming the servers that did not answer (a task server that
    /// hangs must not hold queries, connections and bookkeeping without bound). `None`:
    /// wait however long (measurement runs, where every latency counts).
    pub query_timeout_slos: Option<f64>,
}

impl HandlerConfig {
    /// Server `s`'s offline CDF: its own if given, else the common one.
    pub fn offline_of(&self, s: usize) -> SharedCdf {
        self.offline_per_server.get(s).cloned().unwrap_or_else(|| self.offline.clone())
    }
}
