//! Small helpers the tests share for objects of any kind.

use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;

/// Create `obj` (JSON) as a `DynamicObject` of `ar`, namespaced when `ns` is given; panics
/// with the apiserver's answer if the create fails (for tests).
pub async fn create_dynamic(
    client: &kube::Client,
    ar: &ApiResource,
    ns: Option<&str>,
    obj: serde_json::Value,
) -> DynamicObject {
    let obj: DynamicObject = match serde_json::from_value(obj) {
        Ok(o) => o,
        Err(e) => panic!("not an object: {e}"),
    };
    let api = match ns {
        Some(ns) => Api::<DynamicObject>::namespaced_with(client.clone(), ns, ar),
        None => Api::<DynamicObject>::all_with(client.clone(), ar),
    };
    match api.create(&PostParams::default(), &obj).await {
        Ok(o) => o,
        Err(e) => panic!("create: {e}"),
    }
}
