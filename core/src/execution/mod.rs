//! Which pods are a TrainJob's execution, by ownership, and which of them remain.
//!
//! Kubeflow Trainer v2.3 runs a TrainJob as a JobSet of the same name, which it owns; the
//! JobSet owns a Job per replicated job, and each Job owns its pods (`controller: true`
//! ownerReferences all the way down). JobSet labels the Jobs and pods
//! `jobset.sigs.k8s.io/jobset-name: <name>`, and the Job controller labels its pods
//! `batch.kubernetes.io/controller-uid: <job uid>`.
//!
//! A label alone is a poor witness: anyone who may edit a pod may remove it (hiding a running
//! process from the gate), and anyone who may create a pod may add it (a decoy that blocks a
//! release for ever). So the execution is found by ownership first:
//!
//! - a **JobSet** is the TrainJob's if its controller is a TrainJob of that name (any uid: the
//!   JobSet of an earlier TrainJob of the same name runs processes just the same), or if it
//!   has no controller and carries the TrainJob's name (orphaned by an orphaning delete);
//! - a **Job** is the TrainJob's if its controller is one of those JobSets; or if its
//!   controller JobSet is gone, or it has none, and it carries the JobSet-name label;
//! - a **pod** is the TrainJob's if its controller is one of those Jobs, whatever its labels;
//!   or if its controller Job is gone and it carries the JobSet-name label (a Job deleted
//!   while its pods terminate); or if it has no controller (orphaned by an orphaning delete
//!   of its Job) and carries both the JobSet-name label and the Job controller's
//!   `controller-uid` label.
//!
//! A pod that carries the execution finalizer ([`finalizer`]) counts by its JobSet label
//! alone, which the chart's policy keeps on it: re-owning it, its Job or its JobSet, or
//! removing the Job controller's label, hides nothing.
//!
//! So a relabelled pod of the execution still counts, and a pod that only carries the label
//! (`kubectl run blocker --labels=jobset.sigs.k8s.io/jobset-name=mnist`) does not. What is
//! left to a namespace editor is blocking by forgery (a pod carrying both labels, or owned
//! by a Job made to look like the JobSet's): that only delays the job, never lets two
//! executions run, and whoever may do it may as well delete the TrainJob.
//!
//! The reads are driven sans-I/O: [`remaining`] answers the pods that remain, or names the
//! one more read it needs ([`Need`]). Most calls need only the namespace's pods: when no pod
//! there is owned by a Job or carries the label, nothing more is read.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::names::{TRAINER_GROUP, TRAINJOB_KIND};

/// The label JobSet puts on every Job and pod it creates: the JobSet's (so the TrainJob's)
/// name.
pub const JOBSET_NAME_LABEL: &str = "jobset.sigs.k8s.io/jobset-name";
/// The label the Job controller puts on every pod it creates: the Job's uid.
pub const JOB_CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
/// JobSet's API group.
pub const JOBSET_GROUP: &str = "jobset.x-k8s.io";
/// The Job's API group.
pub const BATCH_GROUP: &str = "batch";

/// One more read [`remaining`] needs before it can answer: a list of the TrainJob's
/// namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    Pods,
    Jobs,
    JobSets,
}

/// The lists read so far, for a caller that drives [`remaining`]: start empty, make the
/// list [`Gathered::answer`] asks for, [`Gathered::give`] it, and ask again. Each list is
/// asked for at most once.
#[derive(Clone, Debug, Default)]
pub struct Gathered {
    pods: Option<Vec<Value>>,
    jobs: Option<Vec<Value>>,
    jobsets: Option<Vec<Value>>,
}

impl Gathered {
    pub fn give(&mut self, what: Need, items: Vec<Value>) {
        let slot = match what {
            Need::Pods => &mut self.pods,
            Need::Jobs => &mut self.jobs,
            Need::JobSets => &mut self.jobsets,
        };
        *slot = Some(items);
    }

    /// The pods of TrainJob `trainjob` that remain, or the list still needed.
    pub fn answer(&self, trainjob: &str) -> Result<Vec<RemainingPod>, Need> {
        let pods = self.pods.as_deref().ok_or(Need::Pods)?;
        remaining(
            trainjob,
            Reads {
                pods,
                jobs: self.jobs.as_deref(),
                jobsets: self.jobsets.as_deref(),
            },
        )
    }
}

/// What has been read so far: the namespace's pods always; its Jobs and JobSets once
/// [`remaining`] asked for them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Reads<'a> {
    pub pods: &'a [Value],
    pub jobs: Option<&'a [Value]>,
    pub jobsets: Option<&'a [Value]>,
}

/// Why a pod of the execution still counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum Why {
    /// It has not finished (pending, running, or its phase is unknown).
    NotFinished,
    /// It is being deleted: its containers may be running out their grace period, or its
    /// node has not confirmed that they ended.
    Terminating,
}

impl Why {
    pub fn text(self) -> &'static str {
        match self {
            Why::NotFinished => "not finished",
            Why::Terminating => "terminating",
        }
    }
}

/// A pod of the execution that remains.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemainingPod {
    pub name: String,
    /// The node it is bound to; `None` if it was never scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// What its node's object says, where it was read (Status reads it; the gate and
    /// Release need only the pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_state: Option<NodeState>,
    pub why: Why,
}

/// What a remaining pod's node says of itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum NodeState {
    /// Its `Ready` condition is `True`: its kubelet reports, and will report the pod's end.
    Ready,
    /// Its `Ready` condition is not `True` (`False` or `Unknown`: the kubelet has stopped
    /// reporting). Its containers may run on with nobody to say so.
    NotReady,
    /// The Node object is gone (deleted): nothing will report on its containers.
    Gone,
}

impl NodeState {
    /// The state of Node `node` (JSON), or of none (`None`: it does not exist).
    pub fn of(node: Option<&Value>) -> NodeState {
        let Some(node) = node else {
            return NodeState::Gone;
        };
        let ready = node
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Ready")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            });
        if ready {
            NodeState::Ready
        } else {
            NodeState::NotReady
        }
    }

    pub fn text(self) -> &'static str {
        match self {
            NodeState::Ready => "Ready",
            NodeState::NotReady => "not Ready",
            NodeState::Gone => "deleted",
        }
    }
}

/// Whether `pod` still counts as a process of the execution, and why.
///
/// A pod being deleted (`deletionTimestamp` set) remains until it is gone: its containers may
/// still be running out their grace period. A pod that has finished (`Succeeded` or `Failed`)
/// and is not being deleted does not remain: its containers have all exited, and a suspended
/// Job keeps its finished pods, so counting them would block a release for ever.
pub fn pod_remains(pod: &Value) -> Option<Why> {
    let deleting = pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    let finished = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    if deleting {
        Some(Why::Terminating)
    } else if !finished {
        Some(Why::NotFinished)
    } else {
        None
    }
}

/// The pods of TrainJob `trainjob`'s executions that remain, in the order listed; or the
/// read still needed to tell.
pub fn remaining(trainjob: &str, reads: Reads<'_>) -> Result<Vec<RemainingPod>, Need> {
    let mut out = Vec::new();
    for pod in reads.pods {
        let Some(why) = pod_remains(pod) else {
            continue;
        };
        if !pod_is_the_jobs(trainjob, pod, &reads)? {
            continue;
        }
        out.push(RemainingPod {
            name: str_at(pod, "/metadata/name").unwrap_or("?").to_owned(),
            node: str_at(pod, "/spec/nodeName")
                .filter(|n| !n.is_empty())
                .map(str::to_owned),
            node_state: None,
            why,
        });
    }
    Ok(out)
}

fn pod_is_the_jobs(trainjob: &str, pod: &Value, reads: &Reads<'_>) -> Result<bool, Need> {
    let labelled = label(pod, JOBSET_NAME_LABEL) == Some(trainjob);
    // A pod carrying the execution finalizer ran on a node as some TrainJob's, and keeps its
    // JobSet label while it does (the chart's policy): its label says whose, whatever has
    // since been done to its owners or its other labels.
    if finalizer::carries(pod) {
        return Ok(labelled);
    }
    match controller(pod) {
        Some(owner) if owner.is(BATCH_GROUP, "Job") => {
            let jobs = reads.jobs.ok_or(Need::Jobs)?;
            match by_uid(jobs, owner.uid) {
                Some(job) => job_is_the_jobs(trainjob, job, reads),
                // Its Job is gone (deleted while its pods terminate): the label says whose.
                None => Ok(labelled),
            }
        }
        // Owned by something else: not a Job's pod, so not JobSet's.
        Some(_) => Ok(false),
        // Orphaned by an orphaning delete of its Job, or never owned: only the Job
        // controller's own label besides JobSet's tells an orphan from a decoy.
        None => Ok(labelled && label(pod, JOB_CONTROLLER_UID_LABEL).is_some()),
    }
}

fn job_is_the_jobs(trainjob: &str, job: &Value, reads: &Reads<'_>) -> Result<bool, Need> {
    let labelled = label(job, JOBSET_NAME_LABEL) == Some(trainjob);
    match controller(job) {
        Some(owner) if owner.is(JOBSET_GROUP, "JobSet") => {
            let jobsets = reads.jobsets.ok_or(Need::JobSets)?;
            match by_uid(jobsets, owner.uid) {
                Some(jobset) => Ok(jobset_is_the_jobs(trainjob, jobset)),
                None => Ok(labelled),
            }
        }
        Some(_) => Ok(false),
        None => Ok(labelled),
    }
}

fn jobset_is_the_jobs(trainjob: &str, jobset: &Value) -> bool {
    match controller(jobset) {
        Some(owner) => owner.is(TRAINER_GROUP, TRAINJOB_KIND) && owner.name == trainjob,
        None => str_at(jobset, "/metadata/name") == Some(trainjob),
    }
}

/// Whether `pod` is some TrainJob's execution pod, given its controller Job and that Job's
/// controller JobSet as found (`None`: not found). The same chain as [`remaining`], read
/// upwards: the finalizer goes only on a TrainJob's pods.
pub fn of_an_execution(pod: &Value, job: Option<&Value>, jobset: Option<&Value>) -> bool {
    let pod_label = label(pod, JOBSET_NAME_LABEL);
    match controller(pod) {
        Some(owner) if owner.is(BATCH_GROUP, "Job") => {}
        _ => return false,
    }
    let Some(job) = job else {
        return pod_label.is_some();
    };
    match controller(job) {
        Some(owner) if owner.is(JOBSET_GROUP, "JobSet") => {}
        Some(_) => return false,
        None => return label(job, JOBSET_NAME_LABEL).is_some(),
    }
    let Some(jobset) = jobset else {
        return label(job, JOBSET_NAME_LABEL).is_some();
    };
    match controller(jobset) {
        Some(owner) => owner.is(TRAINER_GROUP, TRAINJOB_KIND),
        None => false,
    }
}

/// The uid of `object`'s controller, if it is a `kind` of `group`.
pub fn controller_uid<'a>(object: &'a Value, group: &str, kind: &str) -> Option<&'a str> {
    controller(object)
        .filter(|o| o.is(group, kind))
        .map(|o| o.uid)
}

/// An object's controller ownerReference.
struct Owner<'a> {
    api_version: &'a str,
    kind: &'a str,
    name: &'a str,
    uid: &'a str,
}

impl Owner<'_> {
    fn is(&self, group: &str, kind: &str) -> bool {
        self.kind == kind && self.api_version.split('/').next() == Some(group)
    }
}

fn controller(object: &Value) -> Option<Owner<'_>> {
    object
        .pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .map(|r| Owner {
            api_version: r.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
            kind: r.get("kind").and_then(Value::as_str).unwrap_or(""),
            name: r.get("name").and_then(Value::as_str).unwrap_or(""),
            uid: r.get("uid").and_then(Value::as_str).unwrap_or(""),
        })
}

fn by_uid<'a>(objects: &'a [Value], uid: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| !uid.is_empty() && str_at(o, "/metadata/uid") == Some(uid))
}

fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object.pointer("/metadata/labels")?.get(key)?.as_str()
}

fn str_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str)
}

/// Pod names for a message: the first few, and how many more.
pub fn listed<S: AsRef<str>>(names: &[S]) -> String {
    const SHOWN: usize = 5;
    let mut text = names
        .iter()
        .take(SHOWN)
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        text.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    text
}

#[cfg(test)]
mod tests;

pub mod finalizer;
