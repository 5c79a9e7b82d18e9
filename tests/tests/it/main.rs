//! holdfast's integration tests: one test binary, a module per topic, against the real
//! control plane of `holdfast_tests` (see the README, "How the tests get a real control
//! plane").
//!
//! Each topic that calls [`holdfast_tests::ControlPlane::shared`] gets a control plane of its
//! own (keyed by the calling file), so the cluster-scoped objects one topic registers —
//! webhook configurations, Kueue's queues — are never seen by another. Run one topic with a
//! filter: `cargo test -p holdfast-tests --test it -- snapshots::`.

mod adversary;
mod cert_rotation;
mod chart;
mod faults;
mod faults_compaction;
mod faults_flood;
mod faults_kueue;
mod faults_webhook;
mod hold_race;
mod holds_kueue;
mod holds_plain;
mod kueue_smoke;
mod match_conditions;
mod node;
mod outage;
mod seams;
mod smoke;
mod snapshots;
mod webhook;
mod webhook_client_auth;

/// One fault test at a time, across the fault topics: each owns a control plane (or restarts
/// the Kueue its topic shares) and is timed against it, so two never load the machine at once.
pub static ONE_FAULT_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
