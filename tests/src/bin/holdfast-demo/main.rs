//! The demo: a local control plane with holdfast's webhook and controller running against it
//! as real processes, and a walk through what they promise — a snapshot that a runtime edit
//! does not reach, protection a plain user cannot get past, and a hold placed, refused when
//! stale, and released with the CLI. Then it waits (Ctrl-C to stop) and prints how to reach
//! the cluster. `--exit` stops after the walk (used by CI's smoke run).
//!
//! `--node` runs the walk on tier 3's real node instead ([`node`]): holdfast installed by its
//! chart, a TrainJob's pod really running, stopping and starting again.
#![forbid(unsafe_code)]

mod node;
mod pods;
mod shared;

use anyhow::bail;
use holdfast_tests::process::Supervised;
use holdfast_tests::registration::{Registration, Target};
use holdfast_tests::{ControlPlane, Identity};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use shared::{HoldCli, bin_dir, snapshot_runtime, step};
use std::path::PathBuf;
use std::time::{Duration, Instant};

struct Demo {
    cp: ControlPlane,
    bin_dir: PathBuf,
    cli: HoldCli,
    _procs: Vec<Supervised>,
}

fn main() -> anyhow::Result<()> {
    let exit = std::env::args().any(|a| a == "--exit");
    let on_node = std::env::args().any(|a| a == "--node");
    if let Some(unknown) = std::env::args()
        .skip(1)
        .find(|a| !["--exit", "--node", "--kueue"].contains(&a.as_str()))
    {
        bail!("unknown argument {unknown}: the demo takes --exit, --node and --node --kueue");
    }
    if !on_node && std::env::args().any(|a| a == "--kueue") {
        bail!("--kueue walks the node demo in kueue mode: pass --node --kueue");
    }
    holdfast_serve::install_crypto_provider();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if on_node {
        let mode = if std::env::args().any(|a| a == "--kueue") {
            node::Mode::Kueue
        } else {
            node::Mode::Plain
        };
        return rt.block_on(node::run(exit, mode));
    }
    rt.block_on(async move {
        step("starting the local control plane (etcd, kube-apiserver, kube-controller-manager)");
        let cp = tokio::task::spawn_blocking(ControlPlane::start).await??;
        let demo = start_holdfast(cp).await?;
        let walk = walk(&demo).await;
        print_access(&demo);
        walk?;
        if !exit {
            println!("\nRunning. Ctrl-C stops everything and removes the temporary directory.");
            tokio::signal::ctrl_c().await?;
        }
        demo.cp.stop();
        Ok(())
    })
}

async fn start_holdfast(cp: ControlPlane) -> anyhow::Result<Demo> {
    let bin_dir = bin_dir(&["holdfast-controller", "holdfast-webhook", "holdfast"])?;
    // The control plane has installed the chart's RBAC in holdfast-system (its namespace
    // included): the two binaries run with exactly the chart's roles.
    let admin = cp.client(Identity::Admin).await?;

    let tls = cp.dir().join("holdfast-tls");
    std::fs::create_dir_all(&tls)?;
    let cert =
        cp.issue_serving_cert(&["127.0.0.1", "localhost"], Duration::from_secs(24 * 3600))?;
    std::fs::write(tls.join("tls.crt"), &cert.cert_pem)?;
    std::fs::write(tls.join("tls.key"), &cert.key_pem)?;
    std::fs::write(tls.join("ca.crt"), cp.ca_pem())?;
    let port = holdfast_tests::control_plane::free_port;
    let (webhook_port, webhook_admin, api_port, controller_admin) =
        (port()?, port()?, port()?, port()?);
    let tls_args = |a: &mut Vec<String>| {
        a.push(format!("--tls-cert={}", tls.join("tls.crt").display()));
        a.push(format!("--tls-key={}", tls.join("tls.key").display()));
    };
    let group = cp.process_group();

    step("starting holdfast-webhook and holdfast-controller (plain mode) as processes");
    let mut wargs = vec![
        "--mode=plain".to_string(),
        format!(
            "--kubeconfig={}",
            cp.kubeconfig(Identity::Webhook).display()
        ),
        format!("--addr=127.0.0.1:{webhook_port}"),
        format!("--admin-addr=127.0.0.1:{webhook_admin}"),
    ];
    tls_args(&mut wargs);
    let webhook = Supervised::start(
        "holdfast-webhook",
        &bin_dir.join("holdfast-webhook"),
        wargs,
        cp.dir(),
        group,
    )?;
    let mut cargs = vec![
        "--mode=plain".to_string(),
        format!(
            "--kubeconfig={}",
            cp.kubeconfig(Identity::Controller).display()
        ),
        format!("--api-addr=127.0.0.1:{api_port}"),
        format!("--admin-addr=127.0.0.1:{controller_admin}"),
        "--identity=demo-0".to_string(),
    ];
    tls_args(&mut cargs);
    let controller = Supervised::start(
        "holdfast-controller",
        &bin_dir.join("holdfast-controller"),
        cargs,
        cp.dir(),
        group,
    )?;
    wait_ready("holdfast-webhook", webhook_admin, &webhook).await?;

    let reg = Registration::new(
        "holdfast",
        Target::Url(format!("https://127.0.0.1:{webhook_port}")),
        cp.ca_pem().as_bytes().to_vec(),
    );
    let pp = PatchParams::apply("holdfast-demo").force();
    Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .patch("holdfast", &pp, &Patch::Apply(&reg.validating()))
        .await?;
    Api::<MutatingWebhookConfiguration>::all(admin.clone())
        .patch("holdfast", &pp, &Patch::Apply(&reg.mutating()))
        .await?;
    wait_ready("holdfast-controller", controller_admin, &controller).await?;
    println!("    webhook https://127.0.0.1:{webhook_port}, hold API https://127.0.0.1:{api_port}");
    let cli = HoldCli {
        bin: bin_dir.join("holdfast"),
        server: format!("https://127.0.0.1:{api_port}"),
        ca_file: tls.join("ca.crt"),
        kubeconfig: cp.kubeconfig(Identity::Admin),
    };
    Ok(Demo {
        cp,
        bin_dir,
        cli,
        _procs: vec![webhook, controller],
    })
}

async fn wait_ready(name: &str, admin_port: u16, proc: &Supervised) -> anyhow::Result<()> {
    let start = Instant::now();
    let url = format!("http://127.0.0.1:{admin_port}/readyz");
    while start.elapsed() < Duration::from_secs(60) {
        if let Ok(r) = reqwest::get(&url).await
            && r.status().is_success()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("{name} not ready after 60s:\n{}", proc.log_tail(30))
}

/// Run the CLI as the admin; print and return its output.
fn cli(demo: &Demo, args: &[&str]) -> anyhow::Result<String> {
    demo.cli.run(args)
}

/// Run the CLI as the admin; return its output.
fn cli_quiet(demo: &Demo, args: &[&str]) -> anyhow::Result<String> {
    demo.cli.quiet(args)
}

async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = probe().await? {
            return Ok(v);
        }
        if start.elapsed() > Duration::from_secs(60) {
            bail!("{what}: not within 60s");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn walk(demo: &Demo) -> anyhow::Result<()> {
    let cp = &demo.cp;
    let admin = cp.client(Identity::Admin).await?;
    let alice = cp.client(Identity::User).await?;
    let ns = cp.namespace("demo").await?;
    let runtimes = Api::<DynamicObject>::all_with(
        admin.clone(),
        &holdfast_cluster::resources::cluster_training_runtime(),
    );
    let jobs = Api::<DynamicObject>::namespaced_with(
        admin.clone(),
        &ns,
        &holdfast_cluster::resources::trainjob(),
    );
    let runtime_name = format!("torch-distributed-{ns}");
    let runtime = |image: &str| -> anyhow::Result<DynamicObject> {
        Ok(serde_json::from_value(serde_json::json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": runtime_name, "labels": {"trainer.kubeflow.org/framework": "torch"}},
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {}},
                "template": {"spec": {"replicatedJobs": [{"name": "node",
                    "template": {"spec": {"template": {"spec": {"containers": [
                        {"name": "node", "image": image}]}}}}}]}}}
        }))?)
    };

    step(&format!(
        "a platform admin creates ClusterTrainingRuntime {runtime_name} (pytorch 2.10)"
    ));
    runtimes
        .patch(
            &runtime_name,
            &PatchParams::apply("admin"),
            &Patch::Apply(&runtime("pytorch/pytorch:2.10.0")?),
        )
        .await?;

    step("dispatch creates TrainJob mnist, labelled holdfast.dev/managed=true");
    let tj: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "mnist", "labels": {"holdfast.dev/managed": "true"}},
        "spec": {"runtimeRef": {"name": runtime_name}}
    }))?;
    let created = jobs.create(&PostParams::default(), &tj).await?;
    println!(
        "    the webhook closed its start gate: spec.suspend = {}; admitted runtime resourceVersion = {}",
        created.data["spec"]["suspend"],
        created
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("holdfast.dev/admitted-runtime-resource-version"))
            .map(String::as_str)
            .unwrap_or("(none)")
    );

    step("the controller snapshots the runtime (KEP-2599)");
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), &ns);
    let snapshot = eventually("the snapshot", || async {
        Ok(cms.get_opt("mnist-runtime-snapshot").await?)
    })
    .await?;
    let yaml = snapshot_runtime(&snapshot);
    println!("    ConfigMap mnist-runtime-snapshot, data.runtime:");
    for line in yaml.lines() {
        println!("      {line}");
    }

    step("the admin upgrades the runtime to pytorch 2.11: the job's snapshot does not change");
    runtimes
        .patch(
            &runtime_name,
            &PatchParams::apply("admin"),
            &Patch::Apply(&runtime("pytorch/pytorch:2.11.0")?),
        )
        .await?;
    let again = cms.get("mnist-runtime-snapshot").await?;
    let unchanged = again.data == snapshot.data;
    println!("    snapshot unchanged: {unchanged}");
    if !unchanged {
        bail!("the snapshot changed after a runtime edit");
    }
    // The drift report names namespaces and jobs: the hold API serves it to callers it
    // authenticates and authorises (here the admin's token).
    eventually("the drift report", || async {
        let out = cli_quiet(demo, &["drift", "-n", &ns])?;
        Ok(out.contains("mnist").then_some(()))
    })
    .await?;
    println!("    the drift report lists the job the edit did not reach:");
    cli(demo, &["drift", "-n", &ns])?;

    step("a plain user (alice) tries to delete the snapshot");
    match Api::<ConfigMap>::namespaced(alice.clone(), &ns)
        .delete("mnist-runtime-snapshot", &Default::default())
        .await
    {
        Err(kube::Error::Api(s)) => println!("    refused ({}): {}", s.code, s.message),
        Ok(_) => bail!("alice deleted a snapshot"),
        Err(e) => return Err(e.into()),
    }

    step("dispatch opens the start gate");
    cli(demo, &["open", &format!("{ns}/mnist")])?;
    step("dispatch places hold 1 (a node was lost)");
    cli(
        demo,
        &[
            "hold",
            &format!("{ns}/mnist"),
            "--instance",
            "1",
            "--reason",
            "node lost",
        ],
    )?;

    step("alice tries to unsuspend the held job");
    let patch = serde_json::json!({"spec": {"suspend": false}});
    match Api::<DynamicObject>::namespaced_with(
        alice,
        &ns,
        &holdfast_cluster::resources::trainjob(),
    )
    .patch("mnist", &PatchParams::default(), &Patch::Merge(&patch))
    .await
    {
        Err(kube::Error::Api(s)) => println!("    refused ({}): {}", s.code, s.message),
        Ok(_) => bail!("alice unsuspended a held job"),
        Err(e) => return Err(e.into()),
    }

    step("a late call to release an older hold (instance 0) is refused");
    cli(
        demo,
        &["release", &format!("{ns}/mnist"), "--instance", "0"],
    )?;
    step("dispatch releases hold 1: the job runs again and A rises");
    cli(
        demo,
        &["release", &format!("{ns}/mnist"), "--instance", "1"],
    )?;
    cli(demo, &["status", &format!("{ns}/mnist")])?;
    let job = jobs.get("mnist").await?;
    println!(
        "    spec.suspend = {}, holdfast.dev/attempt = {}",
        job.data["spec"]["suspend"],
        job.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("holdfast.dev/attempt"))
            .map(String::as_str)
            .unwrap_or("(none)")
    );
    if job.data["spec"]["suspend"] != false {
        bail!("the job is still suspended after release");
    }
    Ok(())
}

fn print_access(demo: &Demo) {
    println!("\nThe cluster: {}", demo.cp.server);
    println!("{}", demo.cli.exports());
    println!(
        "  {}/holdfast status NAMESPACE/NAME",
        demo.bin_dir.display()
    );
    println!("Logs: {}/*.log", demo.cp.dir().display());
}
