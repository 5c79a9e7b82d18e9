//! The demo's node mode (`tests/demo.sh --node`): the tier-3 cluster (a real node with
//! containerd, kubelet, the real Trainer and JobSet controllers), holdfast installed on it by
//! its chart from its locally built image, and a walk a newcomer can follow — a TrainJob's pod
//! really runs, the runtime is edited and the job keeps its snapshot's image, dispatch holds it
//! with the CLI and the pod really terminates, a stale call is refused, and a release starts a
//! new pod (A rises once). Plain mode; `--kueue` runs the same walk in kueue mode (Kueue
//! running, the job queued, holdfast's readmission check gating it).

use super::pods::{
    describe_running, follow_log, running_pod, runs_snapshot_image, watch_until_gone,
};
use super::shared::{HoldCli, bin_dir, snapshot_runtime, step};
use anyhow::{Context, bail};
use holdfast_core::names::ANN_ATTEMPT;
use holdfast_tests::Identity;
use holdfast_tests::chart_on_node::ChartRelease;
use holdfast_tests::node::NodeCluster;
use holdfast_tests::node_pods::training_runtime;
use holdfast_tests::wait::wait_for;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use std::time::{Duration, Instant};

/// The chart's release and its namespace.
const RELEASE: &str = "demo";
const RELEASE_NAMESPACE: &str = "holdfast-demo";
/// How long the workload keeps running after SIGTERM: the pod stays Terminating that long
/// (longer in kueue mode, where Kueue's re-admission is shown while the pod still terminates).
fn workload_grace_seconds(mode: Mode) -> &'static str {
    match mode {
        Mode::Plain => "8",
        Mode::Kueue => "15",
    }
}
/// The image the admin's runtime edit switches to (the workload's content under another name).
const EDITED_IMAGE: &str = "localhost/holdfast/workload-edited:1";

/// holdfast's mode for the walk.
#[derive(Clone, Copy, PartialEq)]
pub enum Mode {
    Plain,
    Kueue,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
            Mode::Kueue => "kueue",
        }
    }
}

pub async fn run(exit: bool, mode: Mode) -> anyhow::Result<()> {
    let bin_dir = bin_dir(&["holdfast"])?;
    let started = Instant::now();
    step(
        "starting the tier-3 cluster: control plane, containerd, kubelet, kube-scheduler, kube-proxy, \
         JobSet and Trainer (all inside a network namespace of their own)",
    );
    let cluster = tokio::task::spawn_blocking(NodeCluster::start).await??;
    println!("    up in {:.0?}", started.elapsed());
    if mode == Mode::Kueue {
        step("starting Kueue (as a process inside the cluster's namespace)");
        cluster.start_kueue().await?;
    }

    step(&format!(
        "installing holdfast with helm: charts/holdfast, {} mode, its image built locally from the Dockerfile's recipe",
        mode.name()
    ));
    let fullname = format!("{RELEASE}-holdfast");
    let service = format!("{fullname}-controller");
    // The hold API's certificate names the Service and, for the CLI on this machine (which
    // reaches the Service through a forwarded loopback port), `localhost`.
    let names = [
        service.clone(),
        format!("{service}.{RELEASE_NAMESPACE}"),
        format!("{service}.{RELEASE_NAMESPACE}.svc"),
        format!("{service}.{RELEASE_NAMESPACE}.svc.cluster.local"),
        "localhost".to_owned(),
    ];
    let mut sets = vec![format!("mode={}", mode.name())];
    for (i, n) in names.iter().enumerate() {
        sets.push(format!(
            "controller.extraArgs[{i}]=--cert-api-dns-names={n}"
        ));
    }
    let set_refs: Vec<&str> = sets.iter().map(String::as_str).collect();
    let install = Instant::now();
    let release = ChartRelease::install(&cluster, RELEASE, RELEASE_NAMESPACE, &set_refs).await;
    println!(
        "    helm install --wait: {:.0?}; the webhook's and the controller's pods Ready on the node",
        install.elapsed()
    );
    let admin = cluster.client(Identity::Admin).await?;
    for line in holdfast_tests::chart_on_node::pod_states(&admin, RELEASE_NAMESPACE).await {
        println!("      {}", short_pod_state(&line));
    }
    let endpoint = release.hold_api_endpoint(&cluster).await;
    let ca_file = cluster.dir().join("holdfast-demo-ca.crt");
    std::fs::write(&ca_file, &endpoint.ca_pem)?;
    let cli = HoldCli {
        bin: bin_dir.join("holdfast"),
        server: format!("https://localhost:{}", endpoint.local_port),
        ca_file,
        kubeconfig: cluster.kubeconfig(Identity::Admin),
    };
    println!(
        "    the hold API: Service {} ({}), reached from here at {}",
        endpoint.host, endpoint.service, cli.server
    );

    let walked = walk(&cluster, &cli, mode).await;
    print_access(&cluster, &cli);
    walked?;
    println!("\nThe walk took {:.0?} in all.", started.elapsed());
    if !exit {
        println!("\nRunning. Ctrl-C stops everything and removes the temporary directory.");
        tokio::signal::ctrl_c().await?;
    }
    drop(release);
    cluster.stop();
    Ok(())
}

/// `Some("name") Some((Some("Running"), ...))` → the pod's name and phase.
fn short_pod_state(line: &str) -> String {
    let name = line.split('"').nth(1).unwrap_or(line);
    let phase = ["Running", "Pending", "Succeeded", "Failed"]
        .into_iter()
        .find(|p| line.contains(&format!("\"{p}\"")))
        .unwrap_or("?");
    format!("pod {name}: {phase}")
}

async fn walk(cluster: &NodeCluster, cli: &HoldCli, mode: Mode) -> anyhow::Result<()> {
    let admin = cluster.client(Identity::Admin).await?;
    let ns = cluster.namespace("demo").await?;
    let check = format!("{RELEASE}-holdfast-readmission");
    if mode == Mode::Kueue {
        holdfast_tests::kueue::create_queues(&admin, &ns, "main", &[check.as_str()]).await?;
        println!(
            "    LocalQueue main in {ns}, its ClusterQueue gated by holdfast's AdmissionCheck {check}"
        );
    }
    let job = format!("{ns}/mnist");
    let original = cluster.workload_image().to_owned();
    cluster.tag_image(&original, EDITED_IMAGE)?;
    let runtimes: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &ns,
        &holdfast_cluster::resources::training_runtime(),
    );
    let trainjobs: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), &ns, &holdfast_cluster::resources::trainjob());
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);

    step(&format!(
        "a platform admin creates TrainingRuntime torch in namespace {ns}: image {original}"
    ));
    let mut runtime = training_runtime("torch", &original);
    let container = &mut runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
        ["template"]["spec"]["containers"][0];
    container["env"] = serde_json::json!([
        {"name": "WORKLOAD_TERM_GRACE_SECONDS", "value": workload_grace_seconds(mode)},
        {"name": "WORKLOAD_MARK", "value": "runtime v1"},
        {"name": "WORKLOAD_HEARTBEAT_SECONDS", "value": "3"}
    ]);
    // Kueue applies a ClusterQueue's AdmissionChecks by the flavors a Workload is assigned: a
    // pod set requesting nothing would be admitted past the gate.
    container["resources"] = serde_json::json!({"requests": {"cpu": "10m", "memory": "16Mi"}});
    runtimes
        .create(&PostParams::default(), &serde_json::from_value(runtime)?)
        .await?;
    println!(
        "    its pods run the workload program: it logs its configuration, a heartbeat every 3 s, \
         and on SIGTERM keeps running {} s before it exits",
        workload_grace_seconds(mode)
    );

    let mut labels = serde_json::json!({"holdfast.dev/managed": "true"});
    if mode == Mode::Kueue {
        labels["kueue.x-k8s.io/queue-name"] = "main".into();
    }
    step(&format!(
        "dispatch creates TrainJob mnist, labelled {labels}"
    ));
    let tj: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "mnist", "labels": labels},
        "spec": {"runtimeRef": {"name": "torch", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}}
    }))?;
    let created = trainjobs.create(&PostParams::default(), &tj).await?;
    match mode {
        Mode::Plain => println!(
            "    holdfast's webhook (called by the apiserver through its Service) closed the start gate: spec.suspend = {}",
            created.data["spec"]["suspend"]
        ),
        Mode::Kueue => {
            println!(
                "    queued: spec.suspend = {}; Kueue reserves quota, holdfast's check keeps the Workload at the start gate",
                created.data["spec"]["suspend"]
            );
            gate(&admin, &ns, &check, "Pending", "start gate").await;
        }
    }

    step("the runtime is snapshotted (KEP-2599)");
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    let snapshot = wait_for("the snapshot", Duration::from_secs(60), || async {
        cms.get_opt("mnist-runtime-snapshot").await.ok().flatten()
    })
    .await;
    let writer = snapshot
        .metadata
        .managed_fields
        .as_ref()
        .and_then(|f| f.first())
        .and_then(|f| f.manager.clone())
        .unwrap_or_default();
    let yaml = snapshot_runtime(&snapshot);
    println!(
        "    ConfigMap mnist-runtime-snapshot, written by {writer} (Trainer v2.3.0 and holdfast's controller both write it; \
         whichever is first, the other keeps it); the runtime in it runs:"
    );
    for line in yaml
        .lines()
        .filter(|l| l.trim_start().starts_with("image:"))
    {
        println!("      {}", line.trim());
    }
    if !yaml.contains(&original) {
        bail!("the snapshot does not hold the runtime's image {original}:\n{yaml}");
    }

    step(&format!(
        "the admin edits the runtime: image {EDITED_IMAGE}, WORKLOAD_MARK=edited"
    ));
    let path = "/spec/template/spec/replicatedJobs/0/template/spec/template/spec/containers/0";
    let edit: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "replace", "path": format!("{path}/image"), "value": EDITED_IMAGE},
        {"op": "replace", "path": format!("{path}/env/1/value"), "value": "edited"}
    ]))?;
    runtimes
        .patch("torch", &PatchParams::default(), &Patch::<()>::Json(edit))
        .await?;

    step(match mode {
        Mode::Plain => {
            "dispatch opens the start gate with the CLI: Trainer builds the JobSet from the snapshot, the node runs the pod"
        }
        Mode::Kueue => {
            "dispatch opens the start gate with the CLI: holdfast's check turns Ready, Kueue admits the job, Trainer builds the JobSet from the snapshot, the node runs the pod"
        }
    });
    cli.run(&["open", &job])?;
    let first = running_pod(&pods, None).await;
    let first_name = first.metadata.name.clone().unwrap_or_default();
    let first_uid = first.metadata.uid.clone().unwrap_or_default();
    describe_running(&pods, &first).await?;
    runs_snapshot_image(
        &first,
        &original,
        "the pod runs the snapshot's image, not the edited runtime's",
    )?;
    let attempt_before = attempt(&trainjobs).await?;
    println!("    A (holdfast.dev/attempt) = {attempt_before}");

    step(match mode {
        Mode::Plain => {
            "dispatch holds the job (a node was lost): holdfast suspends the TrainJob, Trainer the JobSet; its pod really terminates"
        }
        Mode::Kueue => {
            "dispatch holds the job (a node was lost): holdfast deactivates the Workload, Kueue evicts it and suspends the TrainJob, Trainer the JobSet; its pod really terminates"
        }
    });
    let follower = follow_log(&pods, &first_name).await?;
    let hold_at = Instant::now();
    cli.run(&["hold", &job, "--instance", "1", "--reason", "node lost"])?;
    watch_until_gone(&pods, &first_name, async || match mode {
        Mode::Plain => {
            println!("\n==> dispatch asks to release while the pod is still terminating: refused, nothing written");
            expect_answer(cli.run(&["release", &job, "--instance", "1"])?, "PodsRemain")
        }
        Mode::Kueue => {
            println!("\n==> while the pod is still terminating: a late call to release an older hold (instance 0) is refused as stale");
            expect_answer(cli.run(&["release", &job, "--instance", "0"])?, "StaleHold")?;
            println!("\n==> dispatch releases hold 1 while the pod is still terminating: Kueue may admit again, holdfast's gate waits");
            expect_answer(cli.run(&["release", &job, "--instance", "1"])?, "Released")?;
            gate(&admin, &ns, &check, "Pending", "previous execution").await;
            Ok(())
        }
    })
    .await?;
    println!("    the pod went {:.1?} after the hold", hold_at.elapsed());
    if let Ok(Ok(lines)) = tokio::time::timeout(Duration::from_secs(10), follower).await {
        println!("    its log from the hold on:");
        for l in lines {
            println!("      | {l}");
        }
    }
    cli.run(&["status", &job])?;

    if mode == Mode::Plain {
        step("a late call to release an older hold (instance 0) is refused as stale");
        expect_answer(cli.run(&["release", &job, "--instance", "0"])?, "StaleHold")?;
        step("dispatch releases hold 1: a new pod runs, and A rises once");
        cli.run(&["release", &job, "--instance", "1"])?;
    } else {
        step(
            "the old pod is gone: holdfast's gate lets the Workload in, a new pod runs, and A rises once",
        );
        gate(&admin, &ns, &check, "Ready", "").await;
    }
    let second = running_pod(&pods, Some(&first_uid)).await;
    describe_running(&pods, &second).await?;
    runs_snapshot_image(&second, &original, "a new pod, still the snapshot's image")?;
    let attempt_after = wait_for("A to rise", Duration::from_secs(30), || async {
        attempt(&trainjobs)
            .await
            .ok()
            .filter(|a| *a > attempt_before)
    })
    .await;
    println!("    A (holdfast.dev/attempt): {attempt_before} → {attempt_after}");
    if attempt_after != attempt_before + 1 {
        bail!("A went from {attempt_before} to {attempt_after}, not up by one");
    }
    cli.run(&["status", &job])?;
    Ok(())
}

/// Wait until the Workload's readmission check `check` is in `state` with a message containing
/// `message`; print it.
async fn gate(admin: &kube::Client, ns: &str, check: &str, state: &str, message: &str) {
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), ns, &holdfast_cluster::resources::workload());
    let (name, said) = wait_for(
        "the Workload's readmission check",
        Duration::from_secs(90),
        || async {
            workloads
                .list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find_map(|w| {
                    let c = w
                        .data
                        .pointer("/status/admissionChecks")?
                        .as_array()?
                        .iter()
                        .find(|c| c["name"] == check)?
                        .clone();
                    let said = c["message"].as_str().unwrap_or_default().to_owned();
                    (c["state"] == state && said.contains(message))
                        .then(|| (w.metadata.name.unwrap_or_default(), said))
                })
        },
    )
    .await;
    println!("    Workload {name}: check {check} {state}: {said}");
}

/// An error unless the CLI's answer names `what` (an outcome, error or cause).
fn expect_answer(answer: String, what: &str) -> anyhow::Result<()> {
    if !answer.contains(&format!("\"{what}\"")) {
        bail!("expected {what} from the hold API, got: {answer}");
    }
    Ok(())
}

async fn attempt(trainjobs: &Api<DynamicObject>) -> anyhow::Result<u64> {
    let tj = trainjobs.get("mnist").await?;
    tj.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_ATTEMPT))
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("mnist has no {ANN_ATTEMPT}"))
}

fn print_access(cluster: &NodeCluster, cli: &HoldCli) {
    let kubectl = cluster.node_binaries().bin("kubectl");
    println!("\nThe cluster (apiserver {}):", cluster.server);
    println!("{}", cli.exports());
    println!("  {} get pods -A", kubectl.display());
    println!("  {} status NAMESPACE/NAME", cli.bin.display());
    println!(
        "Logs: {}/*.log (control plane, containerd, kubelet, JobSet, Trainer); holdfast's: kubectl logs -n {RELEASE_NAMESPACE} deploy/{RELEASE}-holdfast-controller",
        cluster.dir().display()
    );
}
