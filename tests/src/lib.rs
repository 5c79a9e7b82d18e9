//! The local Kubernetes control plane that holdfast's tests, demo and benchmarks run against:
//! etcd, kube-apiserver (RBAC, admission webhooks) and kube-controller-manager (garbage
//! collector, namespace and service-account controllers), built from Kubernetes' own Go
//! modules by `tests/cluster/build.sh`, with the Trainer, JobSet and Kueue CRDs installed.
//!
//! Every process runs on loopback in a temporary directory. A reaper process removes them all
//! when the process that started them ends, so a panicking test leaves nothing behind.
#![forbid(unsafe_code)]

pub mod adversary;
pub mod audit;
pub mod bench;
pub mod binaries;
pub mod chart_on_node;
pub mod contract;
pub mod control_plane;
pub mod controller_policy;
pub mod crds;
pub mod described;
pub mod execution_owners;
pub mod extra_node;
pub mod helm;
pub mod hold_support;
pub mod holdfast;
pub mod identity;
pub mod in_process_webhook;
pub mod kueue;
pub mod kueue_support;
pub mod leader_parts;
pub mod lost_node;
pub mod multikueue_clusters;
pub mod netns;
pub mod node;
pub mod node_pods;
pub mod objects;
pub mod process;
pub mod promql;
pub mod rbac;
pub mod readmission_policy;
pub mod registration;
pub mod registry;
pub mod scene;
pub mod serving_files;
pub mod values_table;
pub mod wait;

pub use control_plane::ControlPlane;
pub use identity::Identity;
