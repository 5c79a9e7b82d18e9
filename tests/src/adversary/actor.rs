//! The execution actor: at this tier there is no Trainer, no JobSet and no kubelet, so this
//! small loop plays all of them for one namespace. It is honest about what they do, not about
//! how:
//!
//! - when it sees a TrainJob unsuspended (and not being deleted) while no execution of it is
//!   running, it starts the next execution: it creates two pods labelled as JobSet labels
//!   them (`jobset.sigs.k8s.io/jobset-name=<trainjob>`) and as the Job controller labels
//!   them (`batch.kubernetes.io/controller-uid=<job uid>`), plus the TrainJob's uid, the
//!   number of the execution it believes it is starting, and the resourceVersion of the
//!   TrainJob version it acted on; each owned by a Job whose JobSet the TrainJob owns, as
//!   Trainer, JobSet and the Job controller make them (`holdfast_tests::execution_owners`:
//!   the garbage collector deletes them with the TrainJob, and an orphaning delete leaves
//!   them), and bound to the actor's node ([`NODE`]) as the scheduler binds them;
//! - when it sees the TrainJob suspended, it deletes that execution's pods that the Job still
//!   manages (JobSet suspends its Jobs, the Job controller deletes their pods): a pod
//!   re-owned by an editor (no ownerReference, no `controller-uid` label) is no longer the
//!   Job's and is left running;
//! - as the **kubelet** of [`NODE`], writing pod statuses as the kubelet's field manager
//!   ([`KUBELET_MANAGER`]): it starts a pod's container [`START_DELAY`] after the pod was
//!   created (unless the pod is being deleted or gone by then) and reports it `Running`;
//!   once it sees the pod being deleted — by anyone, gracefully or forced — it ends the
//!   process after the pod's grace period (the first pod of an execution at once, the others
//!   after the sequence's `linger_ms`), reports the pod `Failed` with its container
//!   terminated, and deletes it with `gracePeriodSeconds: 0`, as a kubelet does.
//!
//! A process ends only through that report. A pod whose object is gone before its kubelet
//! reported its end (force-deleted while nothing kept it) leaves a process that, as far as
//! anyone can tell, still runs: its node may as well be lost. The checker counts it so.

use super::check::{
    ACTOR_MANAGER, ANN_POD_TRIGGER_RV, LABEL_JOBSET_NAME, LABEL_POD_EXECUTION, LABEL_POD_UID,
};
use super::history::rv_of;
use futures::StreamExt;
use holdfast_core::execution::JOB_CONTROLLER_UID_LABEL;
use holdfast_core::execution::finalizer::KUBELET_MANAGER;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long a pod lingers once deleted (its grace period, as the kubelet keeps it), per pod.
pub const ANN_LINGER_MS: &str = "adversary.holdfast.test/linger-ms";
/// Pods per execution.
pub const PODS_PER_EXECUTION: usize = 2;
/// The node the actor binds its pods to, and whose kubelet it plays.
pub const NODE: &str = "adversary-node";
/// How long after a pod's creation its kubelet starts its container (sandbox, image).
pub const START_DELAY: Duration = Duration::from_millis(150);

#[derive(Default)]
struct Job {
    executions: u32,
    running: Vec<String>,
    /// The `ownerReferences` of its pods: its Job, whose JobSet the TrainJob owns.
    owners: Option<Value>,
}

/// What the actor last saw of one of its pods.
#[derive(Clone, Debug)]
enum Seen {
    /// Created, not yet delivered by the watch.
    Unseen,
    Present(Box<Pod>),
    Gone,
}

/// The running actor.
pub struct ExecutionActor {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl ExecutionActor {
    /// Starts it in `ns`, acting as `client` (Trainer's identity).
    pub fn start(client: kube::Client, ns: &str, linger: Duration) -> ExecutionActor {
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(client, ns.to_owned(), linger, stop.clone()));
        ExecutionActor { stop, task }
    }

    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// The actor's pods and their kubelets.
struct Pods {
    api: Api<Pod>,
    /// Per pod the actor made: what its watch last delivered, for its kubelet and for the
    /// Job's part.
    seen: HashMap<String, watch::Sender<Seen>>,
    kubelets: tokio::task::JoinSet<()>,
}

impl Pods {
    fn current(&self, name: &str) -> Seen {
        self.seen
            .get(name)
            .map(|s| s.borrow().clone())
            .unwrap_or(Seen::Gone)
    }
}

async fn run(client: kube::Client, ns: String, linger: Duration, stop: CancellationToken) {
    let tjs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &holdfast_cluster::resources::trainjob(),
    );
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut tj_events = std::pin::pin!(watcher(tjs, watcher::Config::default()));
    let mut pod_events = std::pin::pin!(watcher(api.clone(), watcher::Config::default()));
    let mut jobs: HashMap<String, Job> = HashMap::new();
    let mut pods = Pods {
        api,
        seen: HashMap::new(),
        kubelets: tokio::task::JoinSet::new(),
    };
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            Some(ev) = tj_events.next() => {
                if let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = ev
                    && let Ok(v) = serde_json::to_value(o)
                {
                    trainjob(&client, &ns, &mut pods, &mut jobs, &v, linger).await;
                }
            }
            Some(ev) = pod_events.next() => {
                let (p, now) = match ev {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                        let name = p.metadata.name.clone().unwrap_or_default();
                        (name, Seen::Present(Box::new(p)))
                    }
                    Ok(watcher::Event::Delete(p)) => (p.metadata.name.clone().unwrap_or_default(), Seen::Gone),
                    _ => continue,
                };
                if let Some(s) = pods.seen.get(&p) {
                    s.send_replace(now);
                }
            }
            Some(_) = pods.kubelets.join_next(), if !pods.kubelets.is_empty() => {}
        }
    }
    pods.kubelets.abort_all();
}

/// Whether `pod` is still managed by the Job `job_uid`: its controller, or (an orphan the Job
/// controller adopts) its `controller-uid` label.
fn managed_by_job(pod: &Pod, job_uid: &str) -> bool {
    let owned = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == job_uid);
    let labelled = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(JOB_CONTROLLER_UID_LABEL))
        .is_some_and(|u| u == job_uid);
    owned || labelled
}

async fn trainjob(
    client: &kube::Client,
    ns: &str,
    pods: &mut Pods,
    jobs: &mut HashMap<String, Job>,
    tj: &Value,
    linger: Duration,
) {
    let uid = tj
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let name = tj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let suspended = tj.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
    let deleting = tj
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    let job = jobs.entry(uid.clone()).or_default();
    if deleting {
        // The garbage collector deletes the pods with the TrainJob (or, for an orphaning
        // delete, leaves them running).
        job.running.clear();
        return;
    }
    let job_uid = job
        .owners
        .as_ref()
        .and_then(|o| o.pointer("/0/uid"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if suspended && !job.running.is_empty() {
        for p in std::mem::take(&mut job.running) {
            let delete = match pods.current(&p) {
                Seen::Unseen => true,
                Seen::Present(pod) => managed_by_job(&pod, &job_uid),
                Seen::Gone => false,
            };
            if delete {
                let _ = pods.api.delete(&p, &DeleteParams::default()).await;
            }
        }
        return;
    }
    if !suspended && job.running.is_empty() {
        // JobSet's part: the TrainJob's JobSet and its Job, which own the pods.
        if job.owners.is_none() {
            job.owners = crate::execution_owners::ensure(client, ns, &name, &uid)
                .await
                .ok();
        }
        let Some(owners) = job.owners.clone() else {
            return;
        };
        let job_uid = owners
            .pointer("/0/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        job.executions += 1;
        let n = job.executions;
        let short: String = uid.chars().take(5).collect();
        for i in 0..PODS_PER_EXECUTION {
            let pod_name = format!("{name}-e{n}-{i}-{short}");
            let grace = if i == 0 { Duration::ZERO } else { linger };
            let pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "labels": {
                        LABEL_JOBSET_NAME: name,
                        JOB_CONTROLLER_UID_LABEL: job_uid,
                        LABEL_POD_UID: uid,
                        LABEL_POD_EXECUTION: n.to_string(),
                    },
                    "annotations": {
                        ANN_POD_TRIGGER_RV: rv_of(tj).to_string(),
                        ANN_LINGER_MS: grace.as_millis().to_string(),
                    },
                    "ownerReferences": owners,
                },
                "spec": {
                    "automountServiceAccountToken": false,
                    "restartPolicy": "Never",
                    "nodeName": NODE,
                    "containers": [{"name": "node", "image": "pytorch/pytorch:2.10.0"}],
                },
            });
            let Ok(pod) = serde_json::from_value::<Pod>(pod) else {
                continue;
            };
            let (tx, rx) = watch::channel(Seen::Unseen);
            pods.seen.insert(pod_name.clone(), tx);
            let pp = PostParams {
                field_manager: Some(ACTOR_MANAGER.to_owned()),
                ..Default::default()
            };
            if pods.api.create(&pp, &pod).await.is_ok() {
                job.running.push(pod_name.clone());
                pods.kubelets
                    .spawn(kubelet(pods.api.clone(), pod_name, grace, rx));
            } else {
                pods.seen.remove(&pod_name);
            }
        }
    }
}

/// Writes as the kubelet's field manager does (a pod's status is the kubelet's).
fn as_kubelet() -> PatchParams {
    PatchParams {
        field_manager: Some(KUBELET_MANAGER.to_owned()),
        ..Default::default()
    }
}

fn now() -> String {
    holdfast_core::rfc3339::seconds(jiff::Timestamp::now())
}

/// The kubelet of one pod: starts its container, and once the pod is being deleted ends it
/// after `grace`, reports it, and deletes the pod for good.
async fn kubelet(pods: Api<Pod>, name: String, grace: Duration, mut seen: watch::Receiver<Seen>) {
    tokio::time::sleep(START_DELAY).await;
    let starts = match &*seen.borrow() {
        Seen::Gone => return,
        Seen::Present(p) => p.metadata.deletion_timestamp.is_none(),
        Seen::Unseen => true,
    };
    let started_at = starts.then(now);
    if let Some(at) = &started_at {
        let running = json!({"status": {"phase": "Running", "containerStatuses": [
            {"name": "node", "image": "pytorch/pytorch:2.10.0", "imageID": "", "ready": true,
             "started": true, "restartCount": 0, "state": {"running": {"startedAt": at}}}]}});
        if let Err(kube::Error::Api(e)) = pods
            .patch_status(&name, &as_kubelet(), &Patch::Merge(running))
            .await
            && e.code == 404
        {
            // Gone before it started: it never ran.
            return;
        }
    }
    let gone = match seen
        .wait_for(|s| match s {
            Seen::Gone => true,
            Seen::Present(p) => p.metadata.deletion_timestamp.is_some(),
            Seen::Unseen => false,
        })
        .await
    {
        Ok(s) => matches!(*s, Seen::Gone),
        Err(_) => return,
    };
    if gone {
        // The object went before its kubelet said a word: whatever ran may run on.
        return;
    }
    tokio::time::sleep(grace).await;
    let mut terminated = json!({"exitCode": 137, "reason": "Error", "finishedAt": now()});
    if let Some(at) = started_at {
        terminated["startedAt"] = Value::from(at);
    }
    let report = json!({"status": {"phase": "Failed", "containerStatuses": [
        {"name": "node", "image": "pytorch/pytorch:2.10.0", "imageID": "", "ready": false,
         "started": false, "restartCount": 0, "state": {"terminated": terminated}}]}});
    // The report, retried: a kubelet keeps trying until the apiserver has it.
    for _ in 0..10 {
        match pods
            .patch_status(&name, &as_kubelet(), &Patch::Merge(&report))
            .await
        {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 404 => return,
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    let _ = pods
        .delete(
            &name,
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await;
}
