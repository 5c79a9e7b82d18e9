//! The pods of a TrainJob's execution, found by ownership (`holdfast_core::execution`), read
//! for the readmission gate, plain-mode Release and Open, and Status. The decisions are
//! core's; this is the lists they ask for, in the TrainJob's namespace: its pods, then its
//! Jobs and JobSets only when a pod's ownership needs them.

use holdfast_cluster::resources;
use holdfast_core::execution::{Gathered, Need, RemainingPod};
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use serde_json::Value;

pub use holdfast_core::execution::{JOBSET_GROUP, JOBSET_NAME_LABEL, listed};

/// The resource a [`Need`] lists.
pub fn resource(what: Need) -> ApiResource {
    match what {
        Need::Pods => resources::pod(),
        Need::Jobs => resources::job(),
        Need::JobSets => resources::jobset(),
    }
}

/// What a [`Need`]'s list is, for error messages.
pub fn what(need: Need) -> &'static str {
    match need {
        Need::Pods => "listing the namespace's pods",
        Need::Jobs => "listing the namespace's Jobs",
        Need::JobSets => "listing the namespace's JobSets",
    }
}

/// The items of a list answer (JSON).
pub fn items(list: Value) -> Vec<Value> {
    match list {
        Value::Object(mut map) => match map.remove("items") {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// The pods of TrainJob `trainjob` in `namespace` that remain, listed through `client`. A
/// Job or JobSet kind not served lists as empty (no JobSet, so no TrainJob's pod).
pub async fn remaining_with(
    client: &kube::Client,
    namespace: &str,
    trainjob: &str,
) -> Result<Vec<RemainingPod>, kube::Error> {
    let mut gathered = Gathered::default();
    loop {
        let need = match gathered.answer(trainjob) {
            Ok(found) => return Ok(found),
            Err(need) => need,
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &resource(need));
        let listed = match api.list(&ListParams::default()).await {
            Ok(list) => items(serde_json::to_value(&list).map_err(kube::Error::SerdeError)?),
            Err(kube::Error::Api(e)) if e.code == 404 && need != Need::Pods => Vec::new(),
            Err(e) => return Err(e),
        };
        gathered.give(need, listed);
    }
}

/// Names of remaining pods, for messages.
pub fn names(pods: &[RemainingPod]) -> Vec<String> {
    pods.iter().map(|p| p.name.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn list_items_are_taken_out_of_the_answer() {
        assert_eq!(items(json!({"items": [1, 2]})), vec![json!(1), json!(2)]);
        assert!(items(json!({})).is_empty());
    }

    #[test]
    fn each_need_lists_its_own_kind() {
        assert_eq!(resource(Need::Pods).plural, "pods");
        assert_eq!(resource(Need::Jobs).group, "batch");
        assert_eq!(resource(Need::JobSets).group, JOBSET_GROUP);
    }
}
