//! The hold executor: Hold, Release, Open and Status against the apiserver.
//!
//! The decisions are `holdfast_core::hold`'s ([`decide`](holdfast_core::hold::decide) through
//! [`Attempts`](holdfast_core::hold::Attempts)); this module is their I/O. Every call reads the
//! object it acts on, decides, and makes at most one update per read, preconditioned on the
//! read's resourceVersion. On a 409 it reads again and decides again (never a blind retry),
//! at most [`MAX_TRIES`](holdfast_core::hold::MAX_TRIES) writes. Every request first checks
//! the call's deadline, and carries the time left as its own timeout, on the client and at
//! the apiserver (`?timeout=`), so nothing is sent after the deadline.

mod caller;
mod config;
pub mod events;
mod executor;
mod held_workloads;
mod hooks;
mod mark;
mod metrics;
pub mod preflight;
mod reads;
mod requests;
mod snapshot_gate;

pub use caller::{AskOverride, CallerIdentity, IN_PROCESS_CALLER, Overrides};
pub use config::{ExecutorConfig, PolicyProbe};
pub use executor::{HoldExecutor, client_without_retry, without_retry};
pub use hooks::{BetweenReadAndWrite, Hooks, WritePoint};
pub use mark::{
    MarkedJob, SWEEP_INTERVAL as MARK_SWEEP_INTERVAL, sweep as sweep_marks,
    sweep_every as sweep_marks_every,
};
pub use metrics::{CallMetrics, MetricCall};
pub use requests::{
    CallRequests, ReadRequest, RequestError, UNREACHABLE, deadline_in_user_agent, user_agent,
};
