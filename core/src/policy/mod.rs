//! The admission policy: which writes the webhook refuses, and what it patches.
//!
//! Everything here is a pure function of one admission request (operation, resource, user,
//! old and new object), the configured identities and the [`Mode`](crate::mode::Mode). The
//! webhook server decodes an `AdmissionReview` (with [`request::decode_review`]) into an
//! [`AdmissionInput`], asks [`mutate`] for a [`Mutation`] (the patch, and what it did) at the
//! mutating endpoint and [`validate`] for a [`Verdict`] at the validating endpoint, and
//! answers with what they decided.
//!
//! The rules read the objects only through the field list of `object`, which is also what
//! the decoding keeps of them: a rule cannot read what the decoding dropped.
//!
//! The rules are SPEC.md's "The webhook"; where SPEC is silent the decision is written next to
//! the code that makes it. In short:
//!
//! - **Snapshot ConfigMaps** (name ends in `-runtime-snapshot`, or label
//!   `holdfast.dev/runtime-snapshot: "true"`, on the request, the old or the new object):
//!   created by the controller and the snapshot creators (Trainer), deleted by the controller
//!   and the snapshot deleters (garbage collector, namespace controller). Updated by the
//!   controller in everything but `data`/`binaryData` (a snapshot is never rewritten), and by
//!   the snapshot deleters only in ownerReferences/finalizers (the garbage collector orphans
//!   dependents and removes its deletion finalizers with updates). Everyone else: denied.
//! - **TrainJobs and Workloads**: only the controller adds, changes or removes a controller
//!   annotation ([`names::is_controller_annotation`](crate::names::is_controller_annotation)).
//!   At CREATE of a TrainJob, `admitted-runtime-resource-version` is allowed: the mutating
//!   side ([`mutate`]) has just overwritten or removed whatever the user sent.
//! - **kueue mode**: only Kueue changes a TrainJob's `spec.suspend`, whatever its labels (not
//!   even the controller); the queue name stays while the TrainJob is suspended or at its
//!   closed start gate; a managed TrainJob must be queued. Only the controller flips
//!   `spec.active` or moves `spec.queueName` of a Workload that carries a hold; only Kueue makes
//!   a Workload a TrainJob's (ownerReference); a TrainJob's Workload whose pods request
//!   nothing its ClusterQueue covers is refused in a queue that requires the readmission gate
//!   (Kueue would admit it with no flavor, past every AdmissionCheck: `workload_requests`).
//! - **both modes**: the hold finalizer is the controller's; a managed TrainJob keeps its
//!   `managed` label while its start gate is closed.
//! - **plain mode**: only the controller unsuspends a held TrainJob, or a managed TrainJob at
//!   its closed start gate (no `opened` annotation yet); a managed TrainJob is created
//!   suspended.
//! - **JobSets** whose controller is a TrainJob: never refused; the mutating side gives every
//!   replicated Job `podReplacementPolicy: Failed` at CREATE and keeps it at UPDATE
//!   ([`pod_replacement`]).
//! - DELETE of TrainJobs and Workloads, subresource writes (`status`), CONNECT and every other
//!   resource: allowed.

pub mod identities;
pub mod request;

mod admission;
mod fields;
mod mutate;
mod object;
pub mod pod_replacement;
pub mod rules;
mod validate;
mod workload_requests;

#[cfg(test)]
mod testkit;

pub use admission::{AdmissionInput, Operation, Resource, UserInfo, Verdict};
pub use identities::Identities;
pub use mutate::{Mutation, mutate, runtime_to_record};
pub use rules::Rule;
pub use validate::{
    QueueCheck, QueueProblem, UnsuspendCheck, queue_check, queue_verdict, unsuspend_check,
    unsuspend_verdict, validate,
};
pub use workload_requests::{PODS_RESOURCE, RequestsCheck, requests_check, requests_verdict};

pub use crate::names::QUEUE_NAME_LABEL;
