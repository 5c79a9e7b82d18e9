//! holdfast's integration tests: one test binary, a module per topic, against the real
//! control plane of `holdfast_tests` (see the README, "How the tests get a real control
//! plane").
//!
//! Each topic that calls [`holdfast_tests::ControlPlane::shared`] gets a control plane of its
//! own (keyed by the calling file), so the cluster-scoped objects one topic registers —
//! webhook configurations, Kueue's queues — are never seen by another. Run one topic with a
//! filter ending in `::` (filters match anywhere in a test's path, and no topic's name ends
//! another's): `cargo test -p holdfast-tests --test it -- snapshots::`. The fault group is one
//! topic, `faults::`, run one test at a time (`--test-threads 1`); `node::` is opt-in
//! (`--ignored`). Fixtures shared across topics live in the harness crate
//! (`holdfast_tests::hold_support`, `holdfast_tests::kueue_support`).

mod admission;
mod adoption;
mod adversary;
mod alerts;
mod cert_rotation;
mod chart;
mod chart_conventions;
mod cli;
mod cli_oidc;
mod cluster_smoke;
mod controller_configmaps;
mod events;
mod faults;
mod go_client;
mod hold_api_audience;
mod hold_race;
mod holder;
mod holds_kueue;
mod holds_plain;
mod kueue_smoke;
mod lost_nodes;
mod match_conditions;
mod metrics;
mod mode_switch;
mod multikueue;
mod multikueue_workers;
mod node;
mod outage;
mod pod_replacement;
mod readmission;
mod release;
mod seams;
mod snapshots;
mod validation_engines;
mod webhook_client_auth;
