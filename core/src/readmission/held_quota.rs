//! A held job under MultiKueue gives back its quota in the manager.
//!
//! Kueue (v0.19) frees an evicted Workload's quota only once its job is not active, and for
//! a TrainJob that is `status.jobsStatus[].active` (`IsActive` of Kueue's TrainJob
//! integration). The manager's TrainJob has no Trainer of its own: its status is what
//! MultiKueue last copied from the worker's copy, and once MultiKueue deletes that copy
//! nobody writes it again. While holdfast's check is `Pending` through a hold, MultiKueue
//! sends no new copy either, so the last report ("active") would keep the quota forever.
//!
//! Once every worker the queue may run the job in has been read and holds neither a copy
//! of the TrainJob nor a pod of it, holdfast writes what that worker's Trainer would have:
//! no Job active and none ready. Anything less certain writes nothing
//! ([`a_held_job_under_multikueue_gives_back_its_quota_once_no_worker_runs_it`]).

use serde_json::Value;

use super::multikueue::managed_by_multikueue;

/// What one worker holdfast asked says of the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InWorker {
    /// Read: no copy of the TrainJob, no pod of its executions.
    Nothing,
    /// A copy of the TrainJob is there (MultiKueue's, or one of the same name).
    Copy,
    /// Pods of its executions remain there.
    Pods(usize),
    /// The worker could not be read: anything may be there.
    Unreadable,
}

/// Whether the job and its Workload are such that holdfast might give the quota back:
/// [`held_with_quota_under_multikueue`], and the TrainJob reports a Job active or ready.
/// Cheap: no worker is read. The workers decide the rest.
pub fn held_quota_to_give_back(trainjob: &Value, workload: &Value) -> bool {
    held_with_quota_under_multikueue(trainjob, workload) && reports_running(trainjob)
}

/// Whether the TrainJob is MultiKueue's and not being deleted, and its Workload is
/// deactivated (`spec.active` false: held by holdfast, or deactivated by a user or by Kueue
/// itself; Kueue admits no inactive Workload, and the workers decide whether the write is
/// true), evicted, and still reserves quota. The TrainJob's `status.jobsStatus` is not read:
/// a cached TrainJob may lack it.
pub fn held_with_quota_under_multikueue(trainjob: &Value, workload: &Value) -> bool {
    let condition_true = |kind: &str| {
        workload
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.get("type").and_then(Value::as_str) == Some(kind)
                        && c.get("status").and_then(Value::as_str) == Some("True")
                })
            })
    };
    let held = workload.pointer("/spec/active").and_then(Value::as_bool) == Some(false);
    let deleting = |o: &Value| o.pointer("/metadata/deletionTimestamp").is_some();
    managed_by_multikueue(trainjob)
        && !deleting(trainjob)
        && !deleting(workload)
        && held
        && condition_true("Evicted")
        && condition_true("QuotaReserved")
}

/// Whether `status.jobsStatus` reports any Job active or ready (a value that is not a
/// number counts as running: it is not known to be zero).
fn reports_running(trainjob: &Value) -> bool {
    trainjob
        .pointer("/status/jobsStatus")
        .and_then(Value::as_array)
        .is_some_and(|jobs| {
            jobs.iter().any(|j| {
                ["active", "ready"]
                    .iter()
                    .any(|f| j.get(*f).is_some_and(|v| v.as_i64() != Some(0)))
            })
        })
}

/// The manager's TrainJob `trainjob` (as read, its resourceVersion the precondition) with
/// every `status.jobsStatus[].active` and `ready` set to 0, to PUT to its `status`
/// subresource; or `None`: nothing is written. It is written only when
/// [`held_quota_to_give_back`] holds, `covered` (holdfast has a kubeconfig for every worker
/// of the queue's MultiKueueConfig), and every worker in `workers` (at least one) was read
/// and holds [`InWorker::Nothing`]. A copy, a pod, or a worker that cannot be read writes
/// nothing: the job may still run there, and its quota must stay.
pub fn a_held_job_under_multikueue_gives_back_its_quota_once_no_worker_runs_it(
    trainjob: &Value,
    workload: &Value,
    covered: bool,
    workers: &[InWorker],
) -> Option<Value> {
    if !covered
        || workers.is_empty()
        || workers.iter().any(|w| *w != InWorker::Nothing)
        || !held_quota_to_give_back(trainjob, workload)
    {
        return None;
    }
    let mut out = trainjob.clone();
    let jobs = out
        .pointer_mut("/status/jobsStatus")
        .and_then(Value::as_array_mut)?;
    for job in jobs.iter_mut() {
        let entry = job.as_object_mut()?;
        for field in ["active", "ready"] {
            entry.insert(field.to_owned(), Value::from(0));
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::{ANN_HOLD_INSTANCE, MULTIKUEUE_CONTROLLER};
    use serde_json::json;

    fn trainjob(active: Value) -> Value {
        json!({
            "metadata": {"name": "job", "resourceVersion": "7"},
            "spec": {"managedBy": MULTIKUEUE_CONTROLLER},
            "status": {"jobsStatus": [
                {"name": "node", "active": active, "ready": 1, "succeeded": 0, "failed": 0, "suspended": 0},
                {"name": "init", "active": 0, "ready": 0, "succeeded": 1, "failed": 0, "suspended": 0}
            ]}
        })
    }

    fn workload(hold: Option<&str>, active: bool, evicted: &str, reserved: &str) -> Value {
        let mut annotations = serde_json::Map::new();
        if let Some(h) = hold {
            annotations.insert(ANN_HOLD_INSTANCE.to_owned(), json!(h));
        }
        json!({
            "metadata": {"name": "wl", "annotations": annotations},
            "spec": {"active": active},
            "status": {"conditions": [
                {"type": "Evicted", "status": evicted, "reason": "Deactivated"},
                {"type": "QuotaReserved", "status": reserved}
            ]}
        })
    }

    fn decide(tj: &Value, wl: &Value, covered: bool, workers: &[InWorker]) -> Option<Value> {
        a_held_job_under_multikueue_gives_back_its_quota_once_no_worker_runs_it(
            tj, wl, covered, workers,
        )
    }

    #[test]
    fn a_held_job_under_multikueue_gives_back_its_quota_once_no_worker_runs_it_table() {
        let tj = trainjob(json!(1));
        let held = workload(Some("1"), false, "True", "True");
        let nothing = [InWorker::Nothing, InWorker::Nothing];

        let written = decide(&tj, &held, true, &nothing).expect("written");
        assert_eq!(
            written["metadata"]["resourceVersion"], "7",
            "the precondition"
        );
        for job in written["status"]["jobsStatus"].as_array().expect("jobs") {
            assert_eq!(job["active"], 0);
            assert_eq!(job["ready"], 0);
        }
        assert_eq!(
            written["status"]["jobsStatus"][1]["succeeded"], 1,
            "the rest kept"
        );
        assert_eq!(written["spec"], tj["spec"]);

        // A deactivation that is not holdfast's (a user's, Kueue's own), or a hold that cannot
        // be read, gives the quota back too: no worker runs the job, and Kueue admits no
        // inactive Workload.
        for (what, wl) in [
            (
                "deactivated by someone else",
                workload(None, false, "True", "True"),
            ),
            (
                "an unreadable hold",
                workload(Some("x"), false, "True", "True"),
            ),
        ] {
            assert!(decide(&tj, &wl, true, &nothing).is_some(), "{what}");
        }

        let never: [(&str, Value, Value, bool, Vec<InWorker>); 12] = [
            (
                "a copy in a worker",
                tj.clone(),
                held.clone(),
                true,
                vec![InWorker::Nothing, InWorker::Copy],
            ),
            (
                "a pod in a worker",
                tj.clone(),
                held.clone(),
                true,
                vec![InWorker::Pods(1), InWorker::Nothing],
            ),
            (
                "a worker unreadable",
                tj.clone(),
                held.clone(),
                true,
                vec![InWorker::Unreadable, InWorker::Nothing],
            ),
            ("no worker asked", tj.clone(), held.clone(), true, vec![]),
            (
                "a worker of the queue not configured",
                tj.clone(),
                held.clone(),
                false,
                nothing.to_vec(),
            ),
            (
                "held but active",
                tj.clone(),
                workload(Some("1"), true, "True", "True"),
                true,
                nothing.to_vec(),
            ),
            (
                "not evicted yet",
                tj.clone(),
                workload(Some("1"), false, "False", "True"),
                true,
                nothing.to_vec(),
            ),
            (
                "quota already given back",
                tj.clone(),
                workload(Some("1"), false, "True", "False"),
                true,
                nothing.to_vec(),
            ),
            (
                "already reports nothing running",
                {
                    let mut t = trainjob(json!(0));
                    t["status"]["jobsStatus"][0]["ready"] = json!(0);
                    t
                },
                held.clone(),
                true,
                nothing.to_vec(),
            ),
            (
                "not MultiKueue's",
                {
                    let mut t = tj.clone();
                    t["spec"] = json!({});
                    t
                },
                held.clone(),
                true,
                nothing.to_vec(),
            ),
            (
                "the TrainJob being deleted",
                {
                    let mut t = tj.clone();
                    t["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                    t
                },
                held.clone(),
                true,
                nothing.to_vec(),
            ),
            (
                "no jobsStatus",
                {
                    let mut t = tj.clone();
                    t["status"] = json!({});
                    t
                },
                held.clone(),
                true,
                nothing.to_vec(),
            ),
        ];
        for (why, tj, wl, covered, workers) in never {
            assert_eq!(decide(&tj, &wl, covered, &workers), None, "{why}");
        }
    }

    #[test]
    fn a_running_count_that_is_not_a_number_is_not_taken_for_zero() {
        let tj = trainjob(json!("1"));
        let held = workload(Some("1"), false, "True", "True");
        assert!(held_quota_to_give_back(&tj, &held));
    }
}
