//! Preflight: which hold calls this cluster supports, and the CallBound.
//!
//! In three parts: `report`, what preflight answers (`GET /v1/preflight`, its JSON shape);
//! `capability`, which calls are supported between probes (failing closed) and when to probe
//! again; `probes`, the requests that find out (access reviews, discovery, the readmission
//! check, the policies, the dry-run hold round trip).

mod capability;
mod probes;
mod report;

pub(crate) use capability::next_capability;
pub use capability::{Capability, CapabilityVerdict, REPROBE_AFTER};
pub use probes::{POLICY_PROBE_CONFIGMAP, ROUND_TRIP_NAMESPACES};
pub(crate) use probes::{Prober, Scope, run};
pub use report::{
    CallSupport, Check, CheckResult, Gated, PreflightAnswer, PreflightReport, Probe, UngatedQueue,
};
