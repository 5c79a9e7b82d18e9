//! What holdfast's validation costs a write, through the real apiserver, under each
//! `validation.engine` and with no admission at all, in one run. Four namespaces, one per
//! configuration, each with the same objects; every iteration sends each write once to each
//! namespace, in a rotating order, so the machine's noise falls on all alike:
//!
//! - protected, refused: an editor unsuspending a held TrainJob (a dry run: nothing is
//!   stored, so "none" skips the storage write as the refusals do);
//! - protected, refused: an editor deleting a snapshot ConfigMap (a dry run);
//! - unrelated: an editor's ConfigMap write (matchConditions keep it off the webhook);
//! - unrelated: an editor's label on a TrainJob (the match conditions, shared by the webhook
//!   entry and the policy, keep it from both: this is what evaluating them costs).
//!
//! Under `both` the apiserver asks the policies first and stops at their refusal, so a
//! refused protected write never reaches the webhook there.
//!
//! `cargo run --release -p holdfast-tests --example admission_cost_bench`
//! (`HOLDFAST_BENCH_ITERS`, default 300). Prints the README's table: p50 and p99 of each
//! write per configuration, and each as a ratio to "none".

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use holdfast_core::mode::Mode;
use holdfast_tests::bench::percentile;
use holdfast_tests::in_process_webhook::InProcessWebhook;
use holdfast_tests::registration::{Engine, Namespaces, Registration, Target};
use holdfast_tests::{ControlPlane, Identity};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

const WARMUP: usize = 20;
const HOLD: &str = "holdfast.dev/hold-instance";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Config {
    None,
    Engine(Engine),
}

impl Config {
    const ALL: [Config; 4] = [
        Config::None,
        Config::Engine(Engine::Webhook),
        Config::Engine(Engine::Policy),
        Config::Engine(Engine::Both),
    ];

    fn name(self) -> &'static str {
        match self {
            Config::None => "none",
            Config::Engine(e) => e.value(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Write {
    UnsuspendHeld,
    DeleteSnapshot,
    UnrelatedConfigMap,
    TrainJobLabel,
}

impl Write {
    const ALL: [Write; 4] = [
        Write::UnsuspendHeld,
        Write::DeleteSnapshot,
        Write::UnrelatedConfigMap,
        Write::TrainJobLabel,
    ];

    fn name(self) -> &'static str {
        match self {
            Write::UnsuspendHeld => "protected: unsuspend a held TrainJob (refused)",
            Write::DeleteSnapshot => "protected: delete a snapshot ConfigMap (refused)",
            Write::UnrelatedConfigMap => "unrelated: ConfigMap write",
            Write::TrainJobLabel => "unrelated: label on a TrainJob",
        }
    }
}

/// One configuration's namespace, with its objects.
struct Scene {
    config: Config,
    ns: String,
    registration: Option<Registration>,
}

async fn objects(admin: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let tjs: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), ns, &holdfast_cluster::resources::trainjob());
    let mut held = holdfast_tests::objects::trainjob("held", "rt");
    held["metadata"]["annotations"] = json!({HOLD: "1"});
    held["spec"]["suspend"] = json!(true);
    let held = tjs
        .create(&PostParams::default(), &serde_json::from_value(held)?)
        .await?;
    let free = holdfast_tests::objects::trainjob("free", "rt");
    tjs.create(&PostParams::default(), &serde_json::from_value(free)?)
        .await?;
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    let snapshot: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "held-runtime-snapshot",
            "labels": {"holdfast.dev/runtime-snapshot": "true"},
            "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "name": "held", "uid": held.metadata.uid, "controller": true}]},
        "data": {"runtime": "kind: A\n"}}))?;
    cms.create(&PostParams::default(), &snapshot).await?;
    let settings: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "settings"}, "data": {"n": "0"}}))?;
    cms.create(&PostParams::default(), &settings).await?;
    Ok(())
}

/// Sends `write` to `ns` as alice; `Ok(true)` when admission refused it.
async fn send(alice: &kube::Client, ns: &str, write: Write, i: usize) -> anyhow::Result<bool> {
    let tjs: Api<DynamicObject> =
        Api::namespaced_with(alice.clone(), ns, &holdfast_cluster::resources::trainjob());
    let cms: Api<ConfigMap> = Api::namespaced(alice.clone(), ns);
    let dry = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let result = match write {
        Write::UnsuspendHeld => tjs
            .patch(
                "held",
                &dry,
                &Patch::Merge(json!({"spec": {"suspend": false}})),
            )
            .await
            .map(|_| ()),
        Write::DeleteSnapshot => cms
            .delete(
                "held-runtime-snapshot",
                &DeleteParams {
                    dry_run: true,
                    ..Default::default()
                },
            )
            .await
            .map(|_| ()),
        Write::UnrelatedConfigMap => cms
            .patch(
                "settings",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"n": i.to_string()}})),
            )
            .await
            .map(|_| ()),
        Write::TrainJobLabel => tjs
            .patch(
                "free",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"n": i.to_string()}}})),
            )
            .await
            .map(|_| ()),
    };
    match result {
        Ok(()) => Ok(false),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(true),
        Err(e) => Err(e.into()),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let iters: usize = std::env::var("HOLDFAST_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let cp: &ControlPlane = ControlPlane::shared();
    let admin = cp.client(Identity::Admin).await?;
    let alice = cp.client(Identity::User).await?;
    let webhook = InProcessWebhook::start(cp, Mode::Plain, false).await?;

    let mut scenes = Vec::new();
    for config in Config::ALL {
        let ns = cp.namespace(&format!("cost-{}", config.name())).await?;
        objects(&admin, &ns).await?;
        let registration = match config {
            Config::None => None,
            Config::Engine(engine) => {
                let r = Registration::new(
                    format!("holdfast-cost-{}", engine.value()),
                    Target::Url(webhook.url()),
                    cp.ca_pem().as_bytes().to_vec(),
                )
                .with_engine(engine)
                .with_namespaces(Namespaces::Only(vec![ns.clone()]));
                r.install(&admin).await?;
                Some(r)
            }
        };
        scenes.push(Scene {
            config,
            ns,
            registration,
        });
    }
    // The registrations take effect asynchronously: wait (bounded) until each protected
    // write is refused where a configuration judges, and goes through where none does.
    let deadline = Instant::now() + Duration::from_secs(60);
    'wait: loop {
        let mut ready = true;
        for scene in &scenes {
            for write in [Write::UnsuspendHeld, Write::DeleteSnapshot] {
                let refused = send(&alice, &scene.ns, write, 0).await?;
                ready &= refused == (scene.config != Config::None);
            }
        }
        if ready {
            break 'wait;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the configurations did not take effect within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let mut samples: BTreeMap<(Write, Config), Vec<Duration>> = BTreeMap::new();
    for i in 0..(WARMUP + iters) {
        for write in Write::ALL {
            for k in 0..scenes.len() {
                let scene = &scenes[(i + k) % scenes.len()];
                let t = Instant::now();
                let refused = send(&alice, &scene.ns, write, i).await?;
                let took = t.elapsed();
                let protected = matches!(write, Write::UnsuspendHeld | Write::DeleteSnapshot);
                anyhow::ensure!(
                    refused == (protected && scene.config != Config::None),
                    "{} in {}: refused={refused}",
                    write.name(),
                    scene.config.name()
                );
                if i >= WARMUP {
                    samples.entry((write, scene.config)).or_default().push(took);
                }
            }
        }
    }

    println!("\nadmission cost, plain mode, {iters} iterations (p50 / p99 in ms; ratio to none)\n");
    println!("| write | none | webhook | policy | both |");
    println!("| --- | --- | --- | --- | --- |");
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for write in Write::ALL {
        let base = &samples[&(write, Config::None)];
        let (b50, b99) = (percentile(base, 50.0), percentile(base, 99.0));
        let mut row = format!("| {} | {:.2} / {:.2} |", write.name(), ms(b50), ms(b99));
        for config in &Config::ALL[1..] {
            let s = &samples[&(write, *config)];
            let (p50, p99) = (percentile(s, 50.0), percentile(s, 99.0));
            row.push_str(&format!(
                " {:.2} / {:.2} ({:.2}× / {:.2}×) |",
                ms(p50),
                ms(p99),
                p50.as_secs_f64() / b50.as_secs_f64(),
                p99.as_secs_f64() / b99.as_secs_f64()
            ));
        }
        println!("{row}");
    }
    for scene in &scenes {
        if let Some(r) = &scene.registration {
            r.uninstall(&admin).await;
        }
    }
    webhook.stop().await?;
    Ok(())
}
