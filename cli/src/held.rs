//! `status -A` / `status -n NS`: every held job, read from the cluster with the user's own
//! kube client (the hold API has no list call). A hold is on the TrainJob in plain mode and on
//! its Workload in Kueue mode (`holdfast.dev/hold-instance`), so both are listed; each held
//! object's status is classified by holdfast's own `Status::read`, as the API's Status call
//! does.

use holdfast_core::hold::Status;
use holdfast_core::mode::Mode;
use holdfast_core::names::{ANN_HOLD_INSTANCE, TRAINJOB_KIND};
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use serde_json::Value;

/// One held job: its TrainJob's namespace and name, and its status.
pub struct HeldJob {
    pub namespace: String,
    pub name: String,
    pub status: Status,
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

/// What `status -A`/`-n` found: the held jobs it could read, and what it could not (each a
/// sentence); a listing with anything unread is incomplete (exit code 13).
pub struct Listing {
    pub jobs: Vec<HeldJob>,
    pub unread: Vec<String>,
}

/// Every held job in `namespace` (or the cluster), sorted by namespace and name. Workloads
/// are not listed when Kueue's API is not served (plain mode); when they are not readable,
/// or a held job's state cannot be read, the listing says so in `unread`.
pub async fn held_jobs(
    client: &kube::Client,
    namespace: Option<&str>,
) -> Result<Listing, kube::Error> {
    let mut unread = Vec::new();
    let trainjobs = api(client, namespace, &holdfast_cluster::resources::trainjob())
        .list(&ListParams::default())
        .await?
        .items;
    let workloads = match api(client, namespace, &holdfast_cluster::resources::workload())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        Err(kube::Error::Api(e)) if e.code == 404 => Vec::new(),
        Err(kube::Error::Api(e)) if e.code == 403 => {
            unread.push(format!(
                "Workloads are not readable ({}), so no Kueue-mode hold is listed",
                e.message
            ));
            Vec::new()
        }
        Err(e) => return Err(e),
    };
    let mut jobs = Vec::new();
    for tj in trainjobs.iter().filter(|t| held(t)) {
        jobs.push(job(Mode::Plain, tj, None));
    }
    for wl in workloads.iter().filter(|w| held(w)) {
        let ns = wl.metadata.namespace.as_deref().unwrap_or_default();
        let wl_name = wl.metadata.name.as_deref().unwrap_or_default();
        let Some(name) = owning_trainjob(wl) else {
            unread.push(format!(
                "held Workload {ns}/{wl_name} names no TrainJob as its controller"
            ));
            continue;
        };
        match trainjobs.iter().find(|t| {
            t.metadata.namespace.as_deref() == Some(ns) && t.metadata.name.as_deref() == Some(name)
        }) {
            Some(tj) => jobs.push(job(Mode::Kueue, tj, Some(wl))),
            None => unread.push(format!(
                "held Workload {ns}/{wl_name}: its TrainJob {name} was not found"
            )),
        }
    }
    let (jobs, failed): (Vec<_>, Vec<_>) = jobs.into_iter().partition(Result::is_ok);
    unread.extend(failed.into_iter().filter_map(Result::err));
    let mut jobs: Vec<HeldJob> = jobs.into_iter().filter_map(Result::ok).collect();
    jobs.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Ok(Listing { jobs, unread })
}

/// The job's status, or why its annotations cannot be read.
fn job(mode: Mode, tj: &DynamicObject, wl: Option<&DynamicObject>) -> Result<HeldJob, String> {
    let (namespace, name) = key(tj);
    let as_json = |o: &DynamicObject| serde_json::to_value(o).unwrap_or(Value::Null);
    let wl_json = wl.map(as_json);
    match Status::read(mode, &as_json(tj), wl_json.as_ref()) {
        Ok(status) => Ok(HeldJob {
            namespace,
            name,
            status,
        }),
        Err(e) => Err(format!("{namespace}/{name}: {e}")),
    }
}
