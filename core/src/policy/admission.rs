//! What the policy is asked (an admission request, reduced) and what it answers.

use super::rules::Rule;
use serde_json::Value;
use std::fmt;

use super::{fields, object};
use crate::execution::JOBSET_GROUP;
use crate::names::{KUEUE_GROUP, TRAINER_GROUP};

/// The admission operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    /// Parses the AdmissionRequest spelling (`CREATE`, `UPDATE`, `DELETE`, `CONNECT`).
    pub fn from_admission(s: &str) -> Option<Self> {
        match s {
            "CREATE" => Some(Operation::Create),
            "UPDATE" => Some(Operation::Update),
            "DELETE" => Some(Operation::Delete),
            "CONNECT" => Some(Operation::Connect),
            _ => None,
        }
    }

    /// The verb used in denial messages.
    pub fn verb(self) -> &'static str {
        match self {
            Operation::Create => "create",
            Operation::Update => "update",
            Operation::Delete => "delete",
            Operation::Connect => "connect to",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        })
    }
}

/// The resource a request is about, as far as the policy cares.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Resource {
    /// core/v1 `configmaps`.
    ConfigMap,
    /// `trainjobs.trainer.kubeflow.org`.
    TrainJob,
    /// `workloads.kueue.x-k8s.io`.
    Workload,
    /// `jobsets.jobset.x-k8s.io`: a TrainJob's JobSet gets `podReplacementPolicy: Failed`
    /// (`policy::pod_replacement`); never judged.
    JobSet,
    /// Anything else: always allowed, never patched.
    Other { group: String, resource: String },
}

impl Resource {
    /// Classifies an AdmissionRequest's `resource` (group and plural resource name; the
    /// version does not matter).
    pub fn from_group_resource(group: &str, resource: &str) -> Self {
        match (group, resource) {
            ("", "configmaps") => Resource::ConfigMap,
            (TRAINER_GROUP, "trainjobs") => Resource::TrainJob,
            (KUEUE_GROUP, "workloads") => Resource::Workload,
            (JOBSET_GROUP, "jobsets") => Resource::JobSet,
            _ => Resource::Other {
                group: group.to_owned(),
                resource: resource.to_owned(),
            },
        }
    }

    /// The kind's name in messages.
    pub fn kind(&self) -> &str {
        match self {
            Resource::ConfigMap => "ConfigMap",
            Resource::TrainJob => "TrainJob",
            Resource::Workload => "Workload",
            Resource::JobSet => "JobSet",
            Resource::Other { resource, .. } => resource,
        }
    }
}

/// Who sent the request (AdmissionRequest `userInfo`). The policy matches on `username`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub username: String,
    pub groups: Vec<String>,
}

impl UserInfo {
    pub fn new(username: impl Into<String>) -> Self {
        UserInfo {
            username: username.into(),
            groups: Vec::new(),
        }
    }
}

/// One admission request, independent of any Kubernetes client library.
///
/// `object` is the new object (CREATE, UPDATE; for the mutating endpoint before our patch,
/// for the validating endpoint after every mutation), `old_object` the stored one (UPDATE,
/// DELETE). A JSON `null` counts as absent. Neither need be a JSON object: the policy never
/// panics on garbage and says "malformed" where it cannot decide. `dry_run` changes neither
/// verdict nor patch: a dry run must be answered as the real request would be.
#[derive(Clone, Debug, PartialEq)]
pub struct AdmissionInput {
    pub operation: Operation,
    pub resource: Resource,
    pub subresource: Option<String>,
    /// `request.name`; empty on a CREATE with `generateName`.
    pub name: String,
    pub namespace: Option<String>,
    pub user: UserInfo,
    pub object: Option<Value>,
    pub old_object: Option<Value>,
    pub dry_run: bool,
}

impl AdmissionInput {
    /// `namespace/name` (or `name`) for messages; falls back to the objects' `metadata.name`.
    pub fn object_ref(&self) -> String {
        let name = if self.name.is_empty() {
            [self.object.as_ref(), self.old_object.as_ref()]
                .into_iter()
                .find_map(|v| object::Doc::of(v).object().and_then(fields::object_name))
                .unwrap_or("<unnamed>")
        } else {
            self.name.as_str()
        };
        match self.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
            _ => name.to_owned(),
        }
    }
}

/// The validating webhook's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Refused by `rule`. `field` is the JSON path (or object) concerned, `message` the full
    /// sentence for the user: what is protected, who may change it, and who tried; it ends
    /// with the rule's tag (`[rule <id>]`).
    Deny {
        rule: Rule,
        field: String,
        message: String,
    },
}

impl Verdict {
    pub fn is_allowed(&self) -> bool {
        matches!(self, Verdict::Allow)
    }

    /// The rule that refused, if any.
    pub fn rule(&self) -> Option<Rule> {
        match self {
            Verdict::Allow => None,
            Verdict::Deny { rule, .. } => Some(*rule),
        }
    }

    pub(crate) fn deny(rule: Rule, field: impl Into<String>, message: impl Into<String>) -> Self {
        let mut message = message.into();
        message.push_str(&rule.tag());
        Verdict::Deny {
            rule,
            field: field.into(),
            message,
        }
    }
}
