//! `status -A` / `status -n NS`: every held job, read from the cluster with the user's own
//! kube client (the hold API has no list call). A hold is on the TrainJob in plain mode and on
//! its Workload in Kueue mode (`holdfast.dev/hold-instance`), so both are listed; each held
//! object's status is classified by holdfast's own `Status::read`, as the API's Status call
//! does.

use holdfast_core::hold::Status;
use holdfast_core::mode::Mode;
use holdfast_core::names::{ANN_HOLD_INSTANCE, TRAINER_GROUP, TRAINER_VERSION, TRAINJOB_KIND};
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

/// One held job: its TrainJob's namespace and name, and its status.
pub struct HeldJob {
    pub namespace: String,
    pub name: String,
    pub status: Status,
}

fn trainjob_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(TRAINER_GROUP, TRAINER_VERSION, TRAINJOB_KIND),
        "trainjobs",
    )
}

fn api(client: &kube::Client, namespace: Option<&str>, ar: &ApiResource) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

fn held(obj: &DynamicObject) -> bool {
    obj.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANN_HOLD_INSTANCE))
}

/// The name of the TrainJob controlling a Workload.
fn owning_trainjob(workload: &DynamicObject) -> Option<&str> {
    workload
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.kind == TRAINJOB_KIND && o.controller == Some(true))
        .map(|o| o.name.as_str())
}

fn key(obj: &DynamicObject) -> (String, String) {
    (
        obj.metadata.namespace.clone().unwrap_or_default(),
        obj.metadata.name.clone().unwrap_or_default(),
    )
}

/// Every held job in `namespace` (or the cluster), sorted by namespace and name. Workloads
/// are skipped with a note on stderr when Kueue's API is not served or not readable.
pub async fn held_jobs(
    client: &kube::Client,
    namespace: Option<&str>,
) -> Result<Vec<HeldJob>, kube::Error> {
    let trainjobs = api(client, namespace, &trainjob_resource())
        .list(&ListParams::default())
        .await?
        .items;
    let workloads = match api(
        client,
        namespace,
        &holdfast_cluster::queues::workload_resource(),
    )
    .list(&ListParams::default())
    .await
    {
        Ok(list) => list.items,
        Err(kube::Error::Api(e)) if e.code == 404 => Vec::new(),
        Err(kube::Error::Api(e)) if e.code == 403 => {
            eprintln!(
                "holdfast: Workloads are not readable ({}); Kueue-mode holds are not listed",
                e.message
            );
            Vec::new()
        }
        Err(e) => return Err(e),
    };
    let mut jobs = Vec::new();
    for tj in trainjobs.iter().filter(|t| held(t)) {
        jobs.push(job(Mode::Plain, tj, None));
    }
    for wl in workloads.iter().filter(|w| held(w)) {
        let Some(name) = owning_trainjob(wl) else {
            continue;
        };
        let ns = wl.metadata.namespace.as_deref();
        if let Some(tj) = trainjobs.iter().find(|t| {
            t.metadata.namespace.as_deref() == ns && t.metadata.name.as_deref() == Some(name)
        }) {
            jobs.push(job(Mode::Kueue, tj, Some(wl)));
        }
    }
    let mut jobs: Vec<HeldJob> = jobs.into_iter().flatten().collect();
    jobs.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Ok(jobs)
}

/// The job's status; `None` (with a note on stderr) when its annotations cannot be read.
fn job(mode: Mode, tj: &DynamicObject, wl: Option<&DynamicObject>) -> Option<HeldJob> {
    let (namespace, name) = key(tj);
    let as_json = |o: &DynamicObject| serde_json::to_value(o).unwrap_or(Value::Null);
    let wl_json = wl.map(as_json);
    match Status::read(mode, &as_json(tj), wl_json.as_ref()) {
        Ok(status) => Some(HeldJob {
            namespace,
            name,
            status,
        }),
        Err(e) => {
            eprintln!("holdfast: {namespace}/{name}: {e}");
            None
        }
    }
}
