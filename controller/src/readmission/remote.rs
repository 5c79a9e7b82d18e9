//! holdfast in a MultiKueue worker: the Workloads MultiKueue copies into this cluster have
//! no TrainJob owner until they are admitted, so the TrainJob reconcile never sees them and
//! the gate cannot tell which pods of an earlier execution remain. Their check stays
//! `Pending` — letting a copy through would promise what the gate cannot see — and this
//! task says why on it ([`remote_copy_wait`]), with a Warning Event on the Workload, rather
//! than leave it Pending in silence. It runs when such a Workload changes and every
//! `interval`, and decides on a fresh read before it writes.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc::UnboundedReceiver;
use holdfast_core::{
    readmission::{CHECK_PENDING, multikueue::remote_copy_wait, set_checks},
    rfc3339,
};
use jiff::Timestamp;
use kube::api::{Api, DynamicObject};
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::{Error, events as gate_events, reconcile::Context};
use holdfast_cluster::resources;

pub(crate) async fn run(
    ctx: Arc<Context>,
    mut poked: UnboundedReceiver<()>,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(interval);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
            poke = poked.next() => if poke.is_none() { return },
        }
        let ours = ctx.checks.names();
        for w in ctx.workloads.state() {
            let Ok(value) = serde_json::to_value(&*w) else {
                continue;
            };
            if remote_copy_wait(&value, &ours).is_none() {
                continue;
            }
            if let Err(e) = explain(&ctx, &w).await {
                ctx.metrics.failed(e.metric_label());
                tracing::warn!(workload = w.name_any(), error = %e, "explaining the check of a MultiKueue copy failed");
            }
        }
    }
}

/// Writes why on the check of Workload `w`, decided on a fresh read.
async fn explain(ctx: &Context, w: &DynamicObject) -> Result<(), Error> {
    let namespace = w.namespace().unwrap_or_default();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &resources::workload());
    let Some(fresh) = api.get_opt(&w.name_any()).await? else {
        return Ok(());
    };
    let ours = ctx.checks.names();
    let mut value = serde_json::to_value(&fresh)?;
    let Some(message) = remote_copy_wait(&value, &ours) else {
        return Ok(());
    };
    let now = rfc3339::seconds(Timestamp::now());
    if !set_checks(&mut value, &ours, CHECK_PENDING, &message, &now) {
        return Ok(());
    }
    let ar = resources::workload();
    if let Some(o) = value.as_object_mut() {
        o.insert("apiVersion".to_owned(), ar.api_version.clone().into());
        o.insert("kind".to_owned(), ar.kind.clone().into());
    }
    let object: DynamicObject = serde_json::from_value(value)?;
    api.replace_status(&fresh.name_any(), &ctx.pp(), &object)
        .await?;
    ctx.metrics.wrote("wait_multikueue_copy");
    tracing::warn!(namespace, workload = fresh.name_any(), "{message}");
    ctx.events.publish(
        &fresh.object_ref(&ar),
        gate_events::multikueue_copy(&message),
    );
    Ok(())
}
