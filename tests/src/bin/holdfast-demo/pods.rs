//! What the demo's node mode shows of a TrainJob's pods: the Running pod (its node, address,
//! image and log), and a pod's phase and container state as it terminates, from a watch.

use anyhow::{Context, bail};
use futures::{AsyncBufReadExt, StreamExt};
use holdfast_tests::node_pods::{config_of, is_running, running_pods};
use holdfast_tests::wait::wait_for;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use kube::runtime::watcher;
use std::time::Duration;

/// A Running pod of TrainJob mnist's JobSet, other than the pod of uid `not` (within 120 s).
pub async fn running_pod(pods: &Api<Pod>, not: Option<&str>) -> Pod {
    wait_for(
        "the TrainJob's pod Running",
        Duration::from_secs(120),
        || async {
            running_pods(pods, "mnist")
                .await
                .into_iter()
                .find(|p| is_running(p) && (not.is_none() || p.metadata.uid.as_deref() != not))
        },
    )
    .await
}

/// Print pod `p`'s image after `what`; an error unless it is `snapshot_image`.
pub fn runs_snapshot_image(p: &Pod, snapshot_image: &str, what: &str) -> anyhow::Result<()> {
    let image = p
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    println!("    {what}: {image}");
    if image != snapshot_image {
        bail!("the pod runs {image}, not the snapshot's {snapshot_image}");
    }
    Ok(())
}

/// A running pod's name, node, address, image, and its log so far.
pub async fn describe_running(pods: &Api<Pod>, p: &Pod) -> anyhow::Result<()> {
    let name = p.metadata.name.clone().unwrap_or_default();
    let status = p.status.clone().unwrap_or_default();
    println!(
        "    pod {name}: {} on node {}, IP {}, container started {}",
        status.phase.unwrap_or_default(),
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default(),
        status.pod_ip.unwrap_or_default(),
        status
            .container_statuses
            .unwrap_or_default()
            .iter()
            .filter_map(|c| c.state.as_ref()?.running.as_ref()?.started_at.as_ref())
            .map(|t| t.0.to_string())
            .next()
            .unwrap_or_default()
    );
    let config = config_of(pods, &name, "node").await;
    println!(
        "    the workload says it was started from: WORKLOAD_MARK={}",
        config["env"]["WORKLOAD_MARK"]
    );
    // Wait for a heartbeat, so the log shows the program running, not only starting.
    let log = wait_for(
        "a heartbeat in the log",
        Duration::from_secs(30),
        || async {
            let log = pods.logs(&name, &LogParams::default()).await.ok()?;
            log.contains("heartbeat").then_some(log)
        },
    )
    .await;
    println!("    its log:");
    for l in log.lines() {
        let shown = if l.len() > 160 {
            format!("{}…", &l[..l.floor_char_boundary(160)])
        } else {
            l.to_owned()
        };
        println!("      | {shown}");
    }
    Ok(())
}

/// Follow pod `name`'s log from now on; the task returns the lines once the log ends.
pub async fn follow_log(
    pods: &Api<Pod>,
    name: &str,
) -> anyhow::Result<tokio::task::JoinHandle<Vec<String>>> {
    let mut lines = pods
        .log_stream(
            name,
            &LogParams {
                follow: true,
                since_seconds: Some(1),
                ..Default::default()
            },
        )
        .await?
        .lines();
    Ok(tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(Ok(l)) = lines.next().await {
            seen.push(l);
        }
        seen
    }))
}

/// Print pod `name`'s phase and container state each time they change until the pod is gone
/// (at most 120 s); `while_terminating` runs once, the first time the pod is seen Terminating
/// with its container still running (an error if it never is).
pub async fn watch_until_gone(
    pods: &Api<Pod>,
    name: &str,
    mut while_terminating: impl AsyncFnMut() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let stream = watcher(
        pods.clone(),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    );
    let mut stream = std::pin::pin!(stream);
    let mut last = String::new();
    let mut asked = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let ev = tokio::time::timeout_at(deadline, stream.next())
            .await
            .with_context(|| format!("pod {name} still there after 120 s"))?
            .context("the pod watch ended")?;
        let Ok(ev) = ev else { continue };
        match ev {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                let now = pod_state(&p);
                if now != last {
                    println!("    pod {name}: {now}");
                    last = now;
                }
                let running = p
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
                    });
                if !asked && p.metadata.deletion_timestamp.is_some() && running {
                    asked = true;
                    while_terminating().await?;
                }
            }
            watcher::Event::Delete(p) => {
                let now = pod_state(&p);
                if now != last {
                    println!("    pod {name}: {now}");
                }
                println!("    pod {name}: deleted (gone from the apiserver)");
                if !asked {
                    bail!("pod {name} was never seen Terminating with its container running");
                }
                return Ok(());
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }
}

/// A pod's phase, whether it is Terminating, and its container's state.
fn pod_state(p: &Pod) -> String {
    let status = p.status.clone().unwrap_or_default();
    let phase = status.phase.unwrap_or_default();
    let terminating = if p.metadata.deletion_timestamp.is_some() {
        ", Terminating"
    } else {
        ""
    };
    let container = status
        .container_statuses
        .unwrap_or_default()
        .first()
        .and_then(|c| c.state.clone())
        .map(|s| {
            if let Some(t) = s.terminated {
                format!(
                    "container terminated: exit code {}, reason {}, finished {}",
                    t.exit_code,
                    t.reason.unwrap_or_default(),
                    t.finished_at.map(|f| f.0.to_string()).unwrap_or_default()
                )
            } else if s.running.is_some() {
                "container running".to_owned()
            } else {
                "container waiting".to_owned()
            }
        })
        .unwrap_or_else(|| "no container status".to_owned());
    format!("phase {phase}{terminating}; {container}")
}
