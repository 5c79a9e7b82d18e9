//! Whether the chart's readmission-gate policy (`<fullname>-readmission-gate`, kueue mode) is
//! installed and bound to refuse: the ValidatingAdmissionPolicy that makes Kueue's admission
//! of a TrainJob's Workload wait for holdfast's check `Ready`, and its binding. What is read
//! is the policy's presence and failure policy and the binding's policy, actions and scope;
//! its CEL is not compared with the chart's (an edit of that is a cluster admin's, and shows
//! in `helm diff`).
//! Without it, a LocalQueue swapped after a Release, or the check dropped from the
//! ClusterQueue, lets Kueue admit a released job beside its previous execution (the gate is
//! an AdmissionCheck, which Kueue runs only where the queue lists it). Preflight reads both
//! objects by name and judges them here.

use serde_json::Value;

/// What the policy and its binding must be; `None` when they are. `policy` and `binding`
/// are the objects named `name` as read (`None`: not found).
pub fn gate_policy_problem(
    name: &str,
    policy: Option<&Value>,
    binding: Option<&Value>,
) -> Option<String> {
    let remedy = "install it as the chart renders it in kueue mode (helm upgrade the release; \
                  `helm template --set mode=kueue` shows it)";
    let Some(policy) = policy else {
        return Some(format!(
            "ValidatingAdmissionPolicy {name} does not exist, so nothing keeps Kueue from \
             admitting a released job's Workload before holdfast's readmission check is Ready \
             (a LocalQueue swapped, or the check dropped from its ClusterQueue): {remedy}"
        ));
    };
    let failure = policy
        .pointer("/spec/failurePolicy")
        .and_then(Value::as_str)
        .unwrap_or("Fail");
    if failure != "Fail" {
        return Some(format!(
            "ValidatingAdmissionPolicy {name} has failurePolicy {failure}, so an admission it \
             cannot judge goes through: set it to Fail ({remedy})"
        ));
    }
    let Some(binding) = binding else {
        return Some(format!(
            "ValidatingAdmissionPolicyBinding {name} does not exist, so the policy judges \
             nothing: {remedy}"
        ));
    };
    let bound = binding.pointer("/spec/policyName").and_then(Value::as_str);
    if bound != Some(name) {
        return Some(format!(
            "ValidatingAdmissionPolicyBinding {name} binds {} instead of the policy {name}: \
             {remedy}",
            bound.unwrap_or("no policy")
        ));
    }
    let denies = binding
        .pointer("/spec/validationActions")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v.as_str() == Some("Deny")));
    if !denies {
        return Some(format!(
            "ValidatingAdmissionPolicyBinding {name} does not list Deny in \
             spec.validationActions, so the policy refuses nothing: {remedy}"
        ));
    }
    if binding
        .pointer("/spec/matchResources")
        .is_some_and(|m| m.as_object().is_some_and(|o| !o.is_empty()))
    {
        return Some(format!(
            "ValidatingAdmissionPolicyBinding {name} narrows what the policy judges \
             (spec.matchResources), which the chart never does: {remedy}"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NAME: &str = "holdfast-readmission-gate";

    fn policy() -> Value {
        json!({"metadata": {"name": NAME}, "spec": {"failurePolicy": "Fail"}})
    }

    fn binding() -> Value {
        json!({"metadata": {"name": NAME},
            "spec": {"policyName": NAME, "validationActions": ["Deny"]}})
    }

    #[test]
    fn the_readmission_gate_policy_as_the_chart_renders_it_passes() {
        assert_eq!(
            gate_policy_problem(NAME, Some(&policy()), Some(&binding())),
            None
        );
        let defaulted = json!({"spec": {}});
        assert_eq!(
            gate_policy_problem(NAME, Some(&defaulted), Some(&binding())),
            None,
            "failurePolicy defaults to Fail"
        );
    }

    #[test]
    fn a_missing_weakened_or_unbound_readmission_gate_policy_is_named() {
        let cases = [
            (None, Some(binding()), "does not exist"),
            (
                Some(json!({"spec": {"failurePolicy": "Ignore"}})),
                Some(binding()),
                "failurePolicy Ignore",
            ),
            (
                Some(policy()),
                None,
                "Binding holdfast-readmission-gate does not exist",
            ),
            (
                Some(policy()),
                Some(json!({"spec": {"policyName": "other", "validationActions": ["Deny"]}})),
                "binds other",
            ),
            (
                Some(policy()),
                Some(json!({"spec": {"policyName": NAME, "validationActions": ["Warn", "Audit"]}})),
                "does not list Deny",
            ),
            (
                Some(policy()),
                Some(
                    json!({"spec": {"policyName": NAME, "validationActions": ["Deny"],
                    "matchResources": {"namespaceSelector": {"matchLabels": {"x": "y"}}}}}),
                ),
                "narrows",
            ),
        ];
        for (p, b, want) in cases {
            let problem = gate_policy_problem(NAME, p.as_ref(), b.as_ref());
            assert!(
                problem.as_deref().is_some_and(|w| w.contains(want)),
                "{want}: {problem:?}"
            );
        }
    }
}
