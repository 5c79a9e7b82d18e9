//! holdfast's image and chart on the node.

use super::*;

/// The Dockerfile's final stage as the image promises it: the files it copies to `/`, its
/// user and its entrypoint (parsed here independently of holdfast-image.sh).
pub(super) fn dockerfile_layout() -> (Vec<String>, String, Vec<String>) {
    let text = std::fs::read_to_string(holdfast_tests::helm::chart_dir().join("../../Dockerfile"))
        .expect("Dockerfile");
    let lines: Vec<&str> = text.lines().collect();
    let last_from = lines
        .iter()
        .rposition(|l| l.trim_start().to_uppercase().starts_with("FROM "))
        .expect("a FROM");
    let (mut files, mut user, mut entrypoint) = (Vec::new(), String::new(), Vec::new());
    for line in lines.iter().skip(last_from + 1) {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("COPY") => {
                let rest: Vec<&str> = words.filter(|w| !w.starts_with("--")).collect();
                assert_eq!(rest.last(), Some(&"/"), "COPY to / in {line}");
                for src in &rest[..rest.len() - 1] {
                    files.push(format!("/{}", src.rsplit('/').next().expect("name")));
                }
            }
            Some("USER") => user = words.collect::<Vec<_>>().join(" "),
            Some("ENTRYPOINT") => {
                entrypoint = serde_json::from_str(line.trim_start()["ENTRYPOINT".len()..].trim())
                    .expect("ENTRYPOINT in exec form")
            }
            _ => {}
        }
    }
    (files, user, entrypoint)
}

pub(super) fn tar_file(archive: &std::path::Path, member: &str) -> Vec<u8> {
    let out = std::process::Command::new("tar")
        .arg("-xOf")
        .arg(archive)
        .arg(member)
        .output()
        .expect("tar");
    assert!(
        out.status.success(),
        "tar -xOf {} {member}",
        archive.display()
    );
    out.stdout
}

/// The image's config and the paths in its one layer, read from the OCI archive.
pub(super) fn image_layout(archive: &std::path::Path) -> (serde_json::Value, Vec<String>) {
    let blob = |digest: &str| format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"));
    let index: serde_json::Value =
        serde_json::from_slice(&tar_file(archive, "index.json")).expect("index");
    let manifest: serde_json::Value = serde_json::from_slice(&tar_file(
        archive,
        &blob(
            index["manifests"][0]["digest"]
                .as_str()
                .expect("manifest digest"),
        ),
    ))
    .expect("manifest");
    let config: serde_json::Value = serde_json::from_slice(&tar_file(
        archive,
        &blob(
            manifest["config"]["digest"]
                .as_str()
                .expect("config digest"),
        ),
    ))
    .expect("config");
    let layer = tar_file(
        archive,
        &blob(manifest["layers"][0]["digest"].as_str().expect("layer")),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("layer.tar");
    std::fs::write(&path, layer).expect("layer");
    let out = std::process::Command::new("tar")
        .args(["-tvf"])
        .arg(&path)
        .output()
        .expect("tar -t");
    let listing = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    (config, listing)
}

/// The chart installed for real (issue #15, item 4), plain mode: holdfast's image has the
/// Dockerfile's layout; pushed with the chart to the cluster's registry, `helm install
/// oci://… --version V` makes the node pull the image, which containerd did not have (the
/// kubelet's `Pulled` event and `ctr images ls` name the registry's reference); `helm install --wait` brings both Deployments' two replicas Ready on
/// the node; the controller issues the certificates and injects the caBundle; the apiserver
/// calls the webhook through its Service (a user's snapshot edit is refused). The two
/// controller replicas elect one leader (the Lease's holder is one of their pods); deleting
/// that pod moves the Lease to another, which logs that it leads, and a hold through the hold
/// API's Service still holds a TrainJob. `helm upgrade` with another log format
/// replaces every pod (they log plain text now) and admission keeps refusing the edit. `helm
/// uninstall` removes every object of the release's manifest and leaves exactly what the
/// chart README's "Uninstall" lists: the snapshot ConfigMaps, the three certificate Secrets,
/// the Lease, and the hold in force (the TrainJob suspended, its annotations kept).
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn the_chart_on_the_node_guards_snapshots_fails_over_upgrades_and_uninstalls_as_documented() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};

    let cluster = NodeCluster::shared();
    // holdfast's image, built from the Dockerfile's recipe without an engine.
    let (archive, _) = holdfast_image();

    // The same layout as the Dockerfile promises: files, user, entrypoint.
    let (files, user, entrypoint) = dockerfile_layout();
    let (config, listing) = image_layout(&archive);
    assert_eq!(config["config"]["User"], user, "USER");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(entrypoint),
        "ENTRYPOINT"
    );
    for f in &files {
        let entry = listing
            .iter()
            .find(|l| l.ends_with(&format!(" .{f}")))
            .unwrap_or_else(|| panic!("{f} in the image: {listing:?}"));
        assert!(entry.starts_with("-rwxr-xr-x"), "{f} executable: {entry}");
    }
    assert_eq!(files, ["/holdfast-controller", "/holdfast-webhook"]);
    assert_eq!(user, "65532:65532");

    // Installed as a user installs a release: the image and the chart pushed to a registry
    // (the cluster's own), `helm install oci://…`, and the node's containerd pulling the
    // image, which it did not have.
    let helm = holdfast_tests::helm::ensure().expect("helm");
    let published = publish(cluster, &helm);
    cluster
        .remove_image(&published.image)
        .expect("ctr images rm");
    let before = cluster.image_names().expect("ctr images ls");
    assert!(
        !before.contains(&published.image),
        "{} not in containerd before the install: {before:?}",
        published.image
    );
    let ns = "hf-system";
    let mut release = ChartRelease::install(cluster, "hf", ns, &["mode=plain"]).await;
    assert!(
        release.published.chart.starts_with("oci://127.0.0.1:"),
        "{:?}",
        release.published
    );
    assert_eq!(release.published.image, published.image);
    let fullname = release.fullname();
    let admin = cluster.client(Identity::Admin).await.expect("client");
    let after = cluster.image_names().expect("ctr images ls");
    assert!(
        after.contains(&published.image),
        "containerd has {} by its registry name after the install: {after:?}",
        published.image
    );
    let pulled = format!("Successfully pulled image \"{}\"", published.image);
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(admin.clone(), ns);
    let event = wait_for(
        "the kubelet's event of the image pulled from the registry",
        Duration::from_secs(30),
        || async {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("Pulled")
                        && e.message.as_deref().is_some_and(|m| m.starts_with(&pulled))
                })
        },
    )
    .await;
    eprintln!("kubelet: {}", event.message.unwrap_or_default());
    for d in ["hf-holdfast-controller", "hf-holdfast-webhook"] {
        let dep = Api::<Deployment>::namespaced(admin.clone(), ns)
            .get(d)
            .await
            .expect("deployment");
        let st = dep.status.expect("status");
        assert_eq!(
            st.ready_replicas,
            Some(2),
            "{d} has both replicas Ready: {st:?}"
        );
    }
    // Self-managed certificates: the controller issued them and injected the CA.
    let vwc = wait_for("the caBundle injected", Duration::from_secs(60), || async {
        let v = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
            .get("hf-holdfast")
            .await
            .ok()?;
        v.webhooks
            .as_ref()?
            .iter()
            .all(|w| {
                w.client_config
                    .ca_bundle
                    .as_ref()
                    .is_some_and(|b| !b.0.is_empty())
            })
            .then_some(v)
    })
    .await;
    assert!(
        vwc.webhooks
            .unwrap_or_default()
            .iter()
            .all(|w| w.client_config.service.is_some())
    );

    // A TrainJob gets its snapshot; a user's edit of it is refused by the webhook, called by
    // the apiserver through its Service.
    let tns = cluster.namespace("node-chart").await.expect("namespace");
    let trainjobs = workload_runtime(cluster, &admin, &tns).await;
    let create_trainjob = |name: &'static str| create_workload_trainjob(&trainjobs, name, None);
    let user = cluster.client(Identity::User).await.expect("user");
    let cms: Api<ConfigMap> = Api::namespaced(user, &tns);
    let snapshot_of = |job: &'static str| {
        let cms = cms.clone();
        async move {
            let name = format!("{job}-runtime-snapshot");
            wait_for("the snapshot", Duration::from_secs(60), || async {
                cms.get_opt(&name).await.ok().flatten()
            })
            .await
        }
    };
    create_trainjob("tj").await;
    snapshot_of("tj").await;
    snapshot_edit_is_refused(&cms, "tj").await;

    // Leader election between the two controller replicas, inside the cluster: the Lease is
    // held by one of the controller's pods.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let controller_pods = || async {
        pods.list(
            &ListParams::default()
                .labels("app.kubernetes.io/instance=hf,app.kubernetes.io/component=controller"),
        )
        .await
        .expect("controller pods")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect::<Vec<String>>()
    };
    let leases: Api<Lease> = Api::namespaced(admin.clone(), ns);
    let lease_name = format!("{fullname}-controller");
    let holder = || async {
        leases
            .get_opt(&lease_name)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
    };
    let first = controller_pods().await;
    assert_eq!(first.len(), 2, "two controller replicas: {first:?}");
    let leader = wait_for(
        "a controller pod holds the Lease",
        Duration::from_secs(60),
        || async { holder().await.filter(|h| first.contains(h)) },
    )
    .await;
    let follower = first
        .iter()
        .find(|p| **p != leader)
        .expect("the other")
        .clone();

    // The leader's pod is deleted: the other replica takes the Lease, and what only the
    // leader does (the snapshot of a new TrainJob) and a hold through the API both work.
    let failover = Instant::now();
    pods.delete(&leader, &DeleteParams::default())
        .await
        .expect("delete the leader's pod");
    let successor = wait_for(
        "another controller pod holds the Lease",
        Duration::from_secs(90),
        || async {
            let h = holder().await.filter(|h| *h != leader)?;
            controller_pods().await.contains(&h).then_some(h)
        },
    )
    .await;
    eprintln!(
        "Lease moved from {leader} to {successor} (the survivor was {follower}) in {:?}",
        failover.elapsed()
    );
    let log = pods
        .logs(&successor, &LogParams::default())
        .await
        .expect("the new leader's log");
    assert!(
        log.lines()
            .any(|l| l.contains("became leader") && l.contains(&successor)),
        "{successor} logged that it leads:\n{log}"
    );
    create_trainjob("tj2").await;
    snapshot_of("tj2").await;
    holdfast_tests::hold_support::api::grant_alice(cluster, &tns, &["hold"], &["create"]).await;
    let alice = cluster.token(Identity::User).to_owned();
    let (status, answer) = release
        .hold_api(cluster)
        .await
        .call(&alice, &tns, "tj", "hold", Some(1))
        .await;
    assert_eq!(
        (status, &answer),
        (200, &serde_json::json!({"result": "Ok", "outcome": "Held"}))
    );
    assert_eq!(
        trainjobs.get("tj").await.expect("tj").data["spec"]["suspend"],
        true,
        "the hold suspended the TrainJob"
    );

    // helm upgrade with a changed value (the log format) rolls every pod; the new ones log
    // plain text and admission keeps refusing a user's snapshot edit.
    let log_format = |pod: &Pod| {
        pod.spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .and_then(|c| c.env.as_ref())
            .and_then(|env| env.iter().find(|e| e.name == "HOLDFAST_LOG_FORMAT"))
            .and_then(|e| e.value.clone())
    };
    let first_log_line = |name: String| {
        let pods = pods.clone();
        async move {
            wait_for("a log line", Duration::from_secs(30), || async {
                let log = pods.logs(&name, &LogParams::default()).await.ok()?;
                log.lines().next().map(str::to_owned)
            })
            .await
        }
    };
    let release_pods = || async {
        pods.list(&ListParams::default().labels("app.kubernetes.io/instance=hf"))
            .await
            .expect("pods")
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect::<Vec<Pod>>()
    };
    let before = release_pods().await;
    assert_eq!(before.len(), 4, "two controllers, two webhooks");
    for p in &before {
        assert_eq!(log_format(p).as_deref(), Some("json"));
    }
    let line = first_log_line(successor.clone()).await;
    assert!(line.starts_with('{'), "a JSON log line: {line}");
    let old: Vec<String> = before
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    let upgraded = Instant::now();
    release
        .upgrade(cluster, &["mode=plain", "logFormat=plain"])
        .await;
    eprintln!("helm upgrade --wait took {:?}", upgraded.elapsed());
    let after = wait_for(
        "every pod replaced, four Running",
        Duration::from_secs(120),
        || async {
            let now = release_pods().await;
            (now.len() == 4 && all_running_and_new(&now, &old)).then_some(now)
        },
    )
    .await;
    for p in &after {
        assert_eq!(
            log_format(p).as_deref(),
            Some("plain"),
            "{:?}",
            p.metadata.name
        );
        let name = p.metadata.name.clone().expect("name");
        let line = first_log_line(name.clone()).await;
        assert!(!line.starts_with('{'), "{name} logs plain text: {line}");
    }
    snapshot_edit_is_refused(&cms, "tj2").await;

    // helm uninstall removes what the chart installed and leaves what its README says it
    // leaves: the snapshots, the certificate Secrets, the Lease, and a hold in force.
    let manifest = release
        .helm
        .run(
            &[
                "get",
                "manifest",
                "hf",
                "--namespace",
                ns,
                "--kubeconfig",
                &release.kubeconfig,
            ]
            .map(str::to_owned),
        )
        .expect("helm get manifest");
    let installed = holdfast_tests::helm::documents(&manifest).expect("the release's manifest");
    assert!(installed.len() > 10, "{} objects", installed.len());
    release.uninstall().expect("helm uninstall");
    for doc in &installed {
        let (group, version) = match doc["apiVersion"].as_str().expect("apiVersion") {
            gv if gv.contains('/') => gv.split_once('/').expect("group/version"),
            v => ("", v),
        };
        let kind = doc["kind"].as_str().expect("kind");
        let name = doc["metadata"]["name"].as_str().expect("name");
        let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
        let (resource, caps) = kube::discovery::pinned_kind(&admin, &gvk)
            .await
            .unwrap_or_else(|e| panic!("{gvk:?}: {e}"));
        let api: Api<DynamicObject> = match caps.scope {
            kube::discovery::Scope::Namespaced => Api::namespaced_with(
                admin.clone(),
                doc["metadata"]["namespace"].as_str().unwrap_or(ns),
                &resource,
            ),
            kube::discovery::Scope::Cluster => Api::all_with(admin.clone(), &resource),
        };
        wait_for(
            "the release's object removed",
            Duration::from_secs(60),
            || async { matches!(api.get_opt(name).await, Ok(None)).then_some(()) },
        )
        .await;
    }
    let secrets: Vec<String> = Api::<Secret>::namespaced(admin.clone(), ns)
        .list(&ListParams::default().labels("holdfast.dev/certificate"))
        .await
        .expect("secrets")
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    let mut expected = ["ca", "webhook-tls", "controller-tls"].map(|s| format!("{fullname}-{s}"));
    expected.sort();
    let mut secrets = secrets;
    secrets.sort();
    assert_eq!(secrets, expected, "the certificate Secrets stay");
    assert!(
        leases.get_opt(&lease_name).await.expect("lease").is_some(),
        "the Lease stays"
    );
    // The snapshots (holdfast's or Trainer's, whichever wrote first) stay with their jobs.
    let left = Api::<ConfigMap>::namespaced(admin.clone(), &tns);
    for job in ["tj", "tj2"] {
        assert!(
            left.get_opt(&format!("{job}-runtime-snapshot"))
                .await
                .expect("get")
                .is_some(),
            "{job}'s snapshot stays"
        );
    }
    let held = trainjobs.get("tj").await.expect("tj");
    assert_eq!(
        held.data["spec"]["suspend"], true,
        "the hold stays in force"
    );
    assert_eq!(
        held.metadata
            .annotations
            .unwrap_or_default()
            .get(holdfast_core::names::ANN_HOLD_INSTANCE),
        Some(&"1".to_owned()),
        "with its annotations"
    );
    for job in ["tj", "tj2"] {
        trainjobs
            .delete(job, &DeleteParams::default())
            .await
            .expect("delete");
    }
}
