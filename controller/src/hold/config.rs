//! How the executor (and the preflight it runs) talks to the apiserver.

use std::time::Duration;

/// How the executor talks to the apiserver.
#[derive(Clone, Debug)]
pub struct ExecutorConfig {
    /// The apiserver's `--request-timeout` (chart value `timeouts.apiserverRequest`):
    /// CallBound is this plus a margin ([`holdfast_core::hold::call_bound`]).
    pub apiserver_request_timeout: Duration,
    /// The transit margin: a call's requests act as though its deadline were this much
    /// earlier. A request is sent only while more than this is left, and abandoned (if not
    /// yet written, never written) this long before the deadline, so that it usually reaches
    /// the apiserver before the deadline too, when a connection must be opened or the
    /// client's runtime or the apiserver is slow to get to it. Not a bound on arrival: the
    /// CallBound covers a request already on the wire.
    pub transit_margin: Duration,
    /// The deadline of Status and Preflight, which carry none of their own.
    pub read_timeout: Duration,
    /// The product part of every request's User-Agent.
    pub user_agent: String,
    /// The first pause before reading again after a transient failure (it doubles, up to a
    /// second), and between reads while Open waits for a Kueue Workload.
    pub transient_backoff: Duration,
    /// The oldest preflight a call trusts; an older one is made again first (the controller
    /// also probes on a timer this often, so calls rarely wait for one).
    pub preflight_max_age: Duration,
    /// `validation.engine` policy or both: ValidatingAdmissionPolicies judge holdfast's rules,
    /// and preflight proves the apiserver enforces them ([`PolicyProbe`]). `None` (the
    /// webhook judges them): not probed.
    pub policy_probe: Option<PolicyProbe>,
    /// Kueue mode: the name of the chart's readmission-gate ValidatingAdmissionPolicy (and
    /// its binding), which preflight reads: Release and Open answer `Unsupported` while it is
    /// missing or weakened. `None`: not probed (the chart always names it).
    pub gate_policy: Option<String>,
}

/// Where preflight dry-runs a write holdfast's ValidatingAdmissionPolicy must refuse: a
/// ConfigMap the controller may not create (no snapshot name, label or owner), which the
/// chart's `<fullname>-controller-configmaps` policy refuses in every namespace. If the
/// apiserver lets it through, it enforces no ValidatingAdmissionPolicy (the admission plugin
/// is off) or the chart's are not installed, and nothing enforces the rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyProbe {
    /// The namespace of the dry run (the release's: it exists).
    pub namespace: String,
    /// The chart's `validation.engine`, for the message.
    pub engine: String,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig {
            apiserver_request_timeout: Duration::from_secs(60),
            transit_margin: Duration::from_millis(50),
            read_timeout: Duration::from_secs(10),
            user_agent: concat!("holdfast-controller/", env!("CARGO_PKG_VERSION")).to_owned(),
            transient_backoff: Duration::from_millis(50),
            preflight_max_age: Duration::from_secs(60),
            policy_probe: None,
            gate_policy: None,
        }
    }
}
