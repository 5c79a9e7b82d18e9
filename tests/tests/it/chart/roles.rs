//! The chart's RBAC: exactly the documented table, by SubjectAccessReview; a real token of the
//! controller's ServiceAccount, which can snapshot and loses exactly a removed verb; and the
//! controller binary missing one verb, whose log names the permission.

use super::*;
use holdfast_tests::objects::{cluster_training_runtime, create_dynamic, trainjob};
use holdfast_tests::process::Supervised;
use holdfast_tests::wait::wait_for;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::DeleteParams;

/// Whether `user` (a service account of `sa_namespace`) may do something, by
/// SubjectAccessReview.
#[allow(clippy::too_many_arguments)]
async fn may(
    admin: &kube::Client,
    sa_namespace: &str,
    sa: &str,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
    name: Option<&str>,
) -> bool {
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_owned())),
        None => (resource, None),
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(rbac::service_account_user(sa_namespace, sa)),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{sa_namespace}"),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource,
                namespace: namespace.map(str::to_owned),
                name: name.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SubjectAccessReview>::all(admin.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("SubjectAccessReview");
    answer.status.is_some_and(|s| s.allowed)
}

/// `(verb, group, resource, namespace: "release"|"tenant"|"", name)`.
type Access = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

async fn check_table(
    admin: &kube::Client,
    release_ns: &str,
    tenant_ns: &str,
    sa: &str,
    allowed: &[Access],
    denied: &[Access],
) {
    let mut wrong = Vec::new();
    for (expect, table) in [(true, allowed), (false, denied)] {
        for (verb, group, resource, ns, name) in table {
            let namespace = match *ns {
                "release" => Some(release_ns),
                "tenant" => Some(tenant_ns),
                _ => None,
            };
            let name = (!name.is_empty()).then_some(*name);
            let got = may(
                admin, release_ns, sa, verb, group, resource, namespace, name,
            )
            .await;
            if got != expect {
                wrong.push(format!(
                    "{sa} {} {verb} {group}/{resource} ns={ns} name={name:?}",
                    if expect {
                        "should be allowed to"
                    } else {
                        "must not"
                    }
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "RBAC differs from the table:\n{}",
        wrong.join("\n")
    );
}

#[tokio::test]
async fn the_charts_rbac_grants_exactly_the_documented_table() {
    let cp = ControlPlane::shared();
    let helm = helm();
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let tenant = cp.namespace("tenant").await.expect("namespace");

    // plain mode, self-managed certificates, one extra runtime kind.
    let release_ns = cp.namespace("hf-plain").await.expect("namespace");
    let install = Install::new("tbl", &release_ns)
        .set("runtimes.extra[0].apiGroup=slurm.example.com")
        .set("runtimes.extra[0].resources[0]=slurmruntimes");
    let docs = helm.render(&install).expect("render");
    rbac::apply_kinds(&admin, &docs, &rbac::RBAC_KINDS, &release_ns)
        .await
        .expect("apply RBAC");
    let ctl = "tbl-holdfast-controller";
    let tj = "trainer.kubeflow.org";
    let adm = "admissionregistration.k8s.io";
    let allowed: Vec<Access> = vec![
        ("get", tj, "trainjobs", "tenant", ""),
        ("list", tj, "trainjobs", "", ""),
        ("watch", tj, "trainjobs", "", ""),
        ("update", tj, "trainjobs", "tenant", "job"),
        ("get", tj, "trainingruntimes", "tenant", "rt"),
        ("watch", tj, "trainingruntimes", "", ""),
        ("list", tj, "clustertrainingruntimes", "", ""),
        ("get", "slurm.example.com", "slurmruntimes", "tenant", "s"),
        // A hold left from kueue mode is read and released on its Workload; Workloads are
        // watched (metadata only) for such holds.
        ("get", "kueue.x-k8s.io", "workloads", "tenant", "w"),
        ("list", "kueue.x-k8s.io", "workloads", "", ""),
        ("watch", "kueue.x-k8s.io", "workloads", "", ""),
        ("update", "kueue.x-k8s.io", "workloads", "tenant", "w"),
        ("list", "slurm.example.com", "slurmruntimes", "", ""),
        ("get", "", "configmaps", "tenant", "job-runtime-snapshot"),
        ("watch", "", "configmaps", "", ""),
        ("create", "", "configmaps", "tenant", ""),
        ("delete", "", "configmaps", "tenant", "job-runtime-snapshot"),
        ("list", "", "pods", "", ""),
        ("watch", "", "pods", "tenant", ""),
        // A pod is a TrainJob's by ownership: its Job's, whose JobSet the TrainJob owns;
        // the execution finalizer goes on and off its pods (update).
        ("list", "batch", "jobs", "tenant", ""),
        ("watch", "batch", "jobs", "", ""),
        ("list", "jobset.x-k8s.io", "jobsets", "tenant", ""),
        ("watch", "jobset.x-k8s.io", "jobsets", "", ""),
        ("patch", "", "pods", "tenant", "p"),
        // Fenced nodes: one ConfigMap in the release namespace.
        ("update", "", "configmaps", "release", "tbl-holdfast-fences"),
        ("watch", "", "configmaps", "release", "tbl-holdfast-fences"),
        // The hold API's CA, published for its clients.
        (
            "update",
            "",
            "configmaps",
            "release",
            "tbl-holdfast-hold-api-ca",
        ),
        // Status says whether a remaining pod's node is Ready.
        ("get", "", "nodes", "", "n"),
        ("create", "events.k8s.io", "events", "tenant", ""),
        ("patch", "events.k8s.io", "events", "tenant", "e"),
        ("create", "events.k8s.io", "events", "release", ""),
        ("create", "authentication.k8s.io", "tokenreviews", "", ""),
        (
            "create",
            "authorization.k8s.io",
            "subjectaccessreviews",
            "",
            "",
        ),
        ("create", "coordination.k8s.io", "leases", "release", ""),
        (
            "get",
            "coordination.k8s.io",
            "leases",
            "release",
            "tbl-holdfast-controller",
        ),
        (
            "update",
            "coordination.k8s.io",
            "leases",
            "release",
            "tbl-holdfast-controller",
        ),
        ("create", "", "secrets", "release", ""),
        ("get", "", "secrets", "release", "tbl-holdfast-ca"),
        (
            "update",
            "",
            "secrets",
            "release",
            "tbl-holdfast-webhook-tls",
        ),
        (
            "get",
            "",
            "secrets",
            "release",
            "tbl-holdfast-controller-tls",
        ),
        (
            "get",
            adm,
            "validatingwebhookconfigurations",
            "",
            "tbl-holdfast",
        ),
        (
            "patch",
            adm,
            "mutatingwebhookconfigurations",
            "",
            "tbl-holdfast",
        ),
    ];
    let denied: Vec<Access> = vec![
        (
            "update",
            "",
            "configmaps",
            "release",
            "tbl-holdfast-ca-copy",
        ),
        ("patch", tj, "trainjobs", "tenant", "job"),
        ("delete", tj, "trainjobs", "tenant", "job"),
        ("create", tj, "trainjobs", "tenant", ""),
        ("update", tj, "trainjobs/status", "tenant", "job"),
        ("update", tj, "clustertrainingruntimes", "", "rt"),
        ("update", "", "configmaps", "tenant", "job-runtime-snapshot"),
        ("patch", "", "configmaps", "tenant", "job-runtime-snapshot"),
        ("get", "", "pods", "tenant", "p"),
        ("delete", "", "pods", "tenant", "p"),
        ("get", "", "secrets", "tenant", "x"),
        ("list", "", "secrets", "release", ""),
        ("get", "", "secrets", "release", "someone-elses"),
        ("delete", "", "secrets", "release", "tbl-holdfast-ca"),
        ("create", "", "secrets", "tenant", ""),
        ("create", "coordination.k8s.io", "leases", "tenant", ""),
        (
            "update",
            "coordination.k8s.io",
            "leases",
            "release",
            "another-lease",
        ),
        (
            "get",
            adm,
            "validatingwebhookconfigurations",
            "",
            "someone-elses",
        ),
        ("list", adm, "validatingwebhookconfigurations", "", ""),
        (
            "update",
            adm,
            "validatingwebhookconfigurations",
            "",
            "tbl-holdfast",
        ),
        (
            "delete",
            adm,
            "mutatingwebhookconfigurations",
            "",
            "tbl-holdfast",
        ),
        ("list", "kueue.x-k8s.io", "admissionchecks", "", ""),
        ("create", "", "events", "tenant", ""),
        ("get", "events.k8s.io", "events", "tenant", "e"),
        ("create", "", "namespaces", "", ""),
        ("list", "", "nodes", "", ""),
        ("update", "", "nodes", "", "n"),
        ("update", "", "pods", "tenant", "p"),
        ("update", "", "configmaps", "release", "another"),
        ("update", "", "configmaps", "tenant", "tbl-holdfast-fences"),
        ("delete", "batch", "jobs", "tenant", "j"),
        ("get", "jobset.x-k8s.io", "jobsets", "tenant", "j"),
    ];
    check_table(&admin, &release_ns, &tenant, ctl, &allowed, &denied).await;

    let hook = "tbl-holdfast-webhook";
    let allowed: Vec<Access> = vec![
        ("get", tj, "trainingruntimes", "tenant", "rt"),
        ("get", tj, "clustertrainingruntimes", "", "rt"),
        ("get", "slurm.example.com", "slurmruntimes", "tenant", "s"),
        // An unsuspend is refused while the job's Workload carries a hold.
        ("list", "kueue.x-k8s.io", "workloads", "tenant", ""),
    ];
    let denied: Vec<Access> = vec![
        ("list", tj, "trainingruntimes", "tenant", ""),
        ("watch", tj, "clustertrainingruntimes", "", ""),
        ("get", tj, "trainjobs", "tenant", "job"),
        ("get", "", "configmaps", "tenant", "job-runtime-snapshot"),
        ("get", "", "secrets", "release", "tbl-holdfast-webhook-tls"),
        ("create", "", "events", "tenant", ""),
        (
            "get",
            "coordination.k8s.io",
            "leases",
            "release",
            "tbl-holdfast-controller",
        ),
    ];
    check_table(&admin, &release_ns, &tenant, hook, &allowed, &denied).await;

    // kueue mode with cert-manager: the Kueue rules appear, the certificate rules go.
    let release_ns = cp.namespace("hf-kueue").await.expect("namespace");
    let install = Install::new("tbk", &release_ns)
        .set("mode=kueue")
        .set("certs.mode=cert-manager");
    let docs = helm.render(&install).expect("render");
    rbac::apply_kinds(&admin, &docs, &rbac::RBAC_KINDS, &release_ns)
        .await
        .expect("apply RBAC");
    let ctl = "tbk-holdfast-controller";
    let kq = "kueue.x-k8s.io";
    let allowed: Vec<Access> = vec![
        ("get", kq, "workloads", "tenant", "w"),
        ("list", kq, "workloads", "", ""),
        ("watch", kq, "workloads", "", ""),
        ("update", kq, "workloads", "tenant", "w"),
        ("update", kq, "workloads/status", "tenant", "w"),
        ("patch", kq, "workloads/status", "tenant", "w"),
        ("get", kq, "admissionchecks", "", "tbk-holdfast-readmission"),
        ("watch", kq, "admissionchecks", "", ""),
        (
            "update",
            kq,
            "admissionchecks/status",
            "",
            "tbk-holdfast-readmission",
        ),
        ("update", tj, "trainjobs", "tenant", "job"),
        ("list", kq, "localqueues", "", ""),
        ("watch", kq, "clusterqueues", "", ""),
        // Preflight reads the readmission-gate policy and its binding, by name.
        (
            "get",
            adm,
            "validatingadmissionpolicies",
            "",
            "tbk-holdfast-readmission-gate",
        ),
        (
            "get",
            adm,
            "validatingadmissionpolicybindings",
            "",
            "tbk-holdfast-readmission-gate",
        ),
        // Arming its own two webhook configurations, in every certificate mode.
        (
            "get",
            adm,
            "validatingwebhookconfigurations",
            "",
            "tbk-holdfast",
        ),
        (
            "patch",
            adm,
            "validatingwebhookconfigurations",
            "",
            "tbk-holdfast",
        ),
        (
            "patch",
            adm,
            "mutatingwebhookconfigurations",
            "",
            "tbk-holdfast",
        ),
    ];
    let denied: Vec<Access> = vec![
        ("delete", kq, "workloads", "tenant", "w"),
        ("update", kq, "localqueues", "tenant", "q"),
        ("patch", kq, "workloads", "tenant", "w"),
        (
            "update",
            kq,
            "admissionchecks",
            "",
            "tbk-holdfast-readmission",
        ),
        ("create", kq, "admissionchecks", "", ""),
        ("update", kq, "clusterqueues", "", "q"),
        ("create", "", "secrets", "release", ""),
        ("get", "", "secrets", "release", "tbk-holdfast-ca"),
        (
            "get",
            adm,
            "validatingadmissionpolicies",
            "",
            "someone-elses",
        ),
        ("list", adm, "validatingadmissionpolicybindings", "", ""),
        (
            "get",
            adm,
            "validatingwebhookconfigurations",
            "",
            "someone-elses",
        ),
        (
            "patch",
            adm,
            "mutatingwebhookconfigurations",
            "",
            "someone-elses",
        ),
    ];
    check_table(&admin, &release_ns, &tenant, ctl, &allowed, &denied).await;
    let hook = "tbk-holdfast-webhook";
    let allowed: Vec<Access> = vec![
        ("list", kq, "localqueues", "", ""),
        ("watch", kq, "clusterqueues", "", ""),
        ("watch", kq, "admissionchecks", "", ""),
    ];
    let denied: Vec<Access> = vec![
        ("get", kq, "workloads", "tenant", "w"),
        ("update", kq, "clusterqueues", "", "q"),
    ];
    check_table(&admin, &release_ns, &tenant, hook, &allowed, &denied).await;
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

#[tokio::test]
async fn the_controller_service_account_token_can_snapshot_and_loses_exactly_a_removed_verb() {
    let cp = ControlPlane::shared();
    let helm = helm();
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let release_ns = cp.namespace("hf-token").await.expect("namespace");
    let tenant = cp.namespace("tenant").await.expect("namespace");
    let docs = helm
        .render(&Install::new("tok", &release_ns))
        .expect("render");
    rbac::apply_kinds(&admin, &docs, &rbac::RBAC_KINDS, &release_ns)
        .await
        .expect("apply RBAC");
    // A real token for the chart's ServiceAccount, minted by the TokenRequest API.
    let sa = "tok-holdfast-controller";
    let ctl = cp
        .service_account_client(&release_ns, sa)
        .await
        .expect("token");

    // What snapshots need: create and read a ConfigMap in a tenant namespace.
    let cms: Api<ConfigMap> = Api::namespaced(ctl.clone(), &tenant);
    cms.create(&PostParams::default(), &configmap("probe-1", &[]))
        .await
        .expect("the controller may create a ConfigMap in any namespace");
    cms.get("probe-1").await.expect("and read it");
    // What it must not do: rewrite a ConfigMap (it deletes orphaned snapshots only, and
    // creates, never updates).
    let mut edited = cms.get("probe-1").await.expect("read");
    edited.data = Some(BTreeMap::from([("k".to_string(), "changed".to_string())]));
    let err = cms
        .replace("probe-1", &PostParams::default(), &edited)
        .await
        .expect_err("the controller never updates ConfigMaps");
    assert_eq!(status_code(&err), Some(403), "{err}");
    cms.create(&PostParams::default(), &configmap("probe-2", &[]))
        .await
        .expect("create a second");
    cms.delete("probe-2", &DeleteParams::default())
        .await
        .expect("it may delete one (an orphaned snapshot)");
    let err = Api::<Secret>::namespaced(ctl.clone(), &tenant)
        .list(&Default::default())
        .await
        .expect_err("no secrets outside its namespace");
    assert_eq!(status_code(&err), Some(403), "{err}");
    let err = Api::<Secret>::namespaced(ctl.clone(), &release_ns)
        .get("someone-elses")
        .await
        .expect_err("only its own secrets by name");
    assert_eq!(status_code(&err), Some(403), "{err}");

    // Remove `create` on configmaps from the chart's ClusterRole: snapshots break, with an
    // error that says what is missing.
    let cut = without_verb(&docs, "ClusterRole", sa, "configmaps", "create");
    rbac::apply(&admin, &cut, &release_ns, false)
        .await
        .expect("apply the cut role");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    let err = loop {
        n += 1;
        match cms
            .create(
                &PostParams::default(),
                &configmap(&format!("probe-{}", n + 1), &[]),
            )
            .await
        {
            Err(e) => break e,
            Ok(_) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "removing create from the ClusterRole did not take effect"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert_eq!(status_code(&err), Some(403), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("system:serviceaccount:{release_ns}:{sa}"))
            && msg.contains("cannot create resource \"configmaps\""),
        "{msg}"
    );
    // Reading still works: only the removed verb is gone.
    cms.get("probe-1").await.expect("get is still granted");
}

/// The controller binary, run with a token of the chart's ServiceAccount whose ClusterRole
/// lacks `create` on ConfigMaps: the TrainJob gets no snapshot, the log says exactly which
/// permission is missing, and putting the verb back is all it takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_missing_one_verb_takes_no_snapshot_and_its_log_names_the_permission() {
    let cp = ControlPlane::shared();
    let helm = helm();
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let release_ns = cp.namespace("hf-cut").await.expect("namespace");
    let tenant = cp.namespace("cut-tenant").await.expect("namespace");
    let docs = helm
        .render(&Install::new("cut", &release_ns))
        .expect("render");
    let sa = "cut-holdfast-controller";
    let cut = without_verb(&docs, "ClusterRole", sa, "configmaps", "create");
    let mut kept: Vec<Value> = docs
        .iter()
        .filter(|d| !(d["kind"] == "ClusterRole" && d["metadata"]["name"] == sa))
        .cloned()
        .collect();
    kept.push(cut);
    rbac::apply_kinds(&admin, &kept, &rbac::RBAC_KINDS, &release_ns)
        .await
        .expect("apply RBAC without the verb");

    // The real binary, as the chart runs it: its ServiceAccount's token, its Lease.
    let token = rbac::mint_token(&admin, &release_ns, sa, 3600)
        .await
        .expect("token");
    let kubeconfig = cp.dir().join(format!("kubeconfig-{release_ns}.yaml"));
    std::fs::write(&kubeconfig, cp.kubeconfig_yaml("u", &token, "default")).expect("kubeconfig");
    let free = || holdfast_tests::control_plane::free_port().expect("port");
    let mut ctl = Supervised::start(
        &format!("holdfast-controller-{release_ns}"),
        &holdfast_tests::holdfast::binary("holdfast-controller"),
        vec![
            "--mode=plain".into(),
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--api-addr=127.0.0.1:{}", free()),
            format!("--admin-addr=127.0.0.1:{}", free()),
            format!("--lease-namespace={release_ns}"),
            "--lease-name=cut-holdfast-controller".into(),
            format!("--watch-namespace={tenant}"),
        ],
        cp.dir(),
        cp.process_group(),
    )
    .expect("start holdfast-controller");

    let runtime = format!("torch-{tenant}");
    let (ctr, tjs) = (
        holdfast_cluster::resources::cluster_training_runtime(),
        holdfast_cluster::resources::trainjob(),
    );
    create_dynamic(
        &admin,
        &ctr,
        None,
        cluster_training_runtime(&runtime, "pytorch/pytorch:2.10.0"),
    )
    .await;
    create_dynamic(&admin, &tjs, Some(&tenant), trainjob("mnist", &runtime)).await;

    let needle = format!(
        "User \\\"system:serviceaccount:{release_ns}:{sa}\\\" cannot create resource \\\"configmaps\\\""
    );
    let plain_needle = format!(
        "User \"system:serviceaccount:{release_ns}:{sa}\" cannot create resource \"configmaps\""
    );
    let log = wait_for(
        "the controller to log the missing permission",
        Duration::from_secs(60),
        || {
            let log = ctl.log_tail(400);
            let found = log.contains(&needle) || log.contains(&plain_needle);
            async move { found.then_some(log) }
        },
    )
    .await;
    let line = log
        .lines()
        .find(|l| l.contains(&needle) || l.contains(&plain_needle))
        .unwrap_or_default();
    eprintln!("the controller logged: {line}");
    assert!(
        line.contains("\"level\":\"ERROR\"") && line.contains("\"trainjob\":\"mnist\""),
        "an error naming the TrainJob: {line}"
    );
    assert!(ctl.running(), "a missing permission is not a crash:\n{log}");
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &tenant);
    assert!(
        cms.get_opt("mnist-runtime-snapshot")
            .await
            .expect("get")
            .is_none(),
        "no snapshot without create"
    );

    // Exactly that verb was missing: restore the chart's role and the snapshot is taken.
    let full = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == sa)
        .expect("the controller's ClusterRole");
    rbac::apply(&admin, full, &release_ns, false)
        .await
        .expect("restore the role");
    wait_for(
        "the snapshot once create is granted",
        Duration::from_secs(90),
        || {
            let cms = cms.clone();
            async move { cms.get_opt("mnist-runtime-snapshot").await.ok().flatten() }
        },
    )
    .await;
    ctl.kill();
}
