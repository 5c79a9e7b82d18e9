//! The pods of a TrainJob's execution, and whether any of them remains.
//!
//! Kubeflow Trainer v2.3.0 runs a TrainJob as a JobSet of the same name in the same namespace
//! (`jobsetv1alpha2ac.JobSet(trainJob.Name, trainJob.Namespace)` in its jobset plugin), and
//! JobSet v0.10 labels every Job and every pod template it creates with
//! `jobset.sigs.k8s.io/jobset-name: <JobSet name>` (`labelAndAnnotateObject`). So the pods of
//! a TrainJob's execution are the pods labelled `jobset.sigs.k8s.io/jobset-name=<TrainJob
//! name>` in its namespace. The JobSet's UID label is not used: a held TrainJob keeps its
//! JobSet (suspended), and a pod of an older JobSet of the same name is just as much a
//! process that must be gone.

use serde_json::Value;

/// The label JobSet puts on every pod it creates: the JobSet's (so the TrainJob's) name.
pub const JOBSET_NAME_LABEL: &str = "jobset.sigs.k8s.io/jobset-name";

/// The label selector of the pods of TrainJob `trainjob`.
pub fn execution_selector(trainjob: &str) -> String {
    format!("{JOBSET_NAME_LABEL}={trainjob}")
}

/// Whether `pod` still counts as a process of the execution.
///
/// A pod being deleted (`deletionTimestamp` set) remains until it is gone: its containers may
/// still be running out their grace period. A pod that has finished (`Succeeded` or `Failed`)
/// and is not being deleted does not remain: its containers have all exited, and a suspended
/// Job keeps its finished pods, so counting them would block a release forever.
pub fn pod_remains(pod: &Value) -> bool {
    let deleting = pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    let finished = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    deleting || !finished
}

/// The names of the pods of a `PodList` (as JSON) that remain.
pub fn remaining(list: &Value) -> Vec<String> {
    list.get("items")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter(|p| pod_remains(p))
                .map(|p| {
                    p.pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                        .to_owned()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Pod names for a message: the first few, and how many more.
pub fn listed(names: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut text = names
        .iter()
        .take(SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        text.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pod_lists_name_the_first_five_and_count_the_rest() {
        let names: Vec<String> = (0..7).map(|i| format!("p{i}")).collect();
        assert_eq!(listed(&names[..2]), "p0, p1");
        assert_eq!(listed(&names), "p0, p1, p2, p3, p4 and 2 more");
        assert_eq!(listed(&[]), "");
    }

    #[test]
    fn selector_is_the_jobset_name_label() {
        assert_eq!(
            execution_selector("mnist"),
            "jobset.sigs.k8s.io/jobset-name=mnist"
        );
    }

    #[test]
    fn pods_remain_until_gone_or_finished() {
        let cases = [
            (
                json!({"metadata": {}, "status": {"phase": "Running"}}),
                true,
            ),
            (
                json!({"metadata": {}, "status": {"phase": "Pending"}}),
                true,
            ),
            (json!({"metadata": {}}), true),
            (
                json!({"metadata": {}, "status": {"phase": "Unknown"}}),
                true,
            ),
            (
                json!({"metadata": {}, "status": {"phase": "Succeeded"}}),
                false,
            ),
            (
                json!({"metadata": {}, "status": {"phase": "Failed"}}),
                false,
            ),
            (
                json!({"metadata": {"deletionTimestamp": "2026-11-29T11:00:00Z"}, "status": {"phase": "Running"}}),
                true,
            ),
            (
                json!({"metadata": {"deletionTimestamp": "2026-11-29T11:00:00Z"}, "status": {"phase": "Succeeded"}}),
                true,
            ),
            (
                json!({"metadata": {"deletionTimestamp": null}, "status": {"phase": "Failed"}}),
                false,
            ),
        ];
        for (pod, want) in cases {
            assert_eq!(pod_remains(&pod), want, "{pod}");
        }
    }

    #[test]
    fn remaining_lists_names() {
        let list = json!({"items": [
            {"metadata": {"name": "a"}, "status": {"phase": "Running"}},
            {"metadata": {"name": "b"}, "status": {"phase": "Succeeded"}},
        ]});
        assert_eq!(remaining(&list), vec!["a".to_owned()]);
        assert!(remaining(&json!({})).is_empty());
    }
}
