//! What Helm users expect of a chart beside its objects: NOTES.txt saying how to bind the
//! hold-caller role and reach the hold API, Artifact Hub's annotations, a `kubeVersion` that
//! is the oldest Kubernetes the suite runs on, and a `helm test` hook: its Pod admitted under
//! the restricted Pod Security level by the real apiserver, and its check
//! (`holdfast-controller check-install`) run against the real apiserver, webhook and hold API.

use clap::Parser;
use holdfast_controller::install_check::{self, CheckArgs};
use holdfast_core::mode::Mode;
use holdfast_tests::helm::{self, Helm};
use holdfast_tests::hold_support::api::{grant_alice, start_api};
use holdfast_tests::hold_support::executor;
use holdfast_tests::holdfast::register_webhook;
use holdfast_tests::in_process_webhook::InProcessWebhook;
use holdfast_tests::{ControlPlane, Identity};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

fn helm() -> Helm {
    helm::ensure().expect("helm (tests/cluster/helm/build.sh)")
}

fn chart_yaml() -> Value {
    let text = std::fs::read_to_string(helm::chart_dir().join("Chart.yaml")).expect("Chart.yaml");
    serde_saphyr::from_str(&text).expect("Chart.yaml is YAML")
}

/// NOTES.txt as `helm install` prints it, rendered offline: `helm template` leaves NOTES.txt
/// out, so a copy of the chart renders it inside a ConfigMap.
fn notes(set: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let chart = dir.path().join("holdfast");
    let copied = Command::new("cp")
        .arg("-r")
        .arg(helm::chart_dir())
        .arg(&chart)
        .status()
        .expect("cp");
    assert!(copied.success());
    let templates = chart.join("templates");
    let text = std::fs::read_to_string(templates.join("NOTES.txt")).expect("NOTES.txt");
    std::fs::write(
        templates.join("_notes_under_test.tpl"),
        format!("{{{{- define \"notes-under-test\" -}}}}\n{text}{{{{- end -}}}}\n"),
    )
    .expect("write");
    std::fs::write(
        templates.join("notes-under-test.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: |\n{{ include \"notes-under-test\" . | indent 4 }}\n",
    )
    .expect("write");
    let mut args: Vec<String> = [
        "template",
        "hf",
        chart.to_str().expect("utf-8"),
        "--namespace",
        "holdfast-system",
        "--show-only",
        "templates/notes-under-test.yaml",
    ]
    .map(String::from)
    .into();
    for s in set {
        args.push("--set".into());
        args.push((*s).into());
    }
    let out = helm().run(&args).expect("NOTES render");
    let docs = helm::documents(&out).expect("documents");
    docs[0]["data"]["notes"].as_str().expect("notes").to_owned()
}

/// NOTES.txt names where the hold API's CA is published, the ConfigMap
/// `<fullname>-hold-api-ca` (key ca.crt) the controller keeps in the release namespace, who
/// may get it, and that `helm uninstall` leaves it.
#[test]
fn notes_name_the_hold_api_ca_configmap_and_who_may_get_it() {
    let text = notes(&[]);
    assert!(
        text.contains("ConfigMap hf-holdfast-hold-api-ca (key ca.crt)\nin holdfast-system, which any authenticated user may get by name"),
        "{text}"
    );
    assert!(
        text.contains("kubectl -n holdfast-system get configmap hf-holdfast-hold-api-ca"),
        "{text}"
    );
    assert!(
        text.contains("`helm uninstall` leaves that ConfigMap"),
        "{text}"
    );
    let nobody = notes(&["rbac.holdApiCaReaders=null"]);
    assert!(
        nobody.contains("rbac.holdApiCaReaders is empty: nobody is granted it"),
        "{nobody}"
    );
}

/// NOTES.txt, in both modes, says which ClusterRole to bind and how (naming the namespaces
/// rbac.holdCallerBindings binds when it has any), and where the hold API is served and how
/// the CLI finds it; without the role it says no role lets anyone call.
#[test]
fn notes_say_how_to_bind_the_hold_caller_role_and_reach_the_hold_api_in_both_modes() {
    for mode in ["plain", "kueue"] {
        let mode_set = format!("mode={mode}");
        let text = notes(&[&mode_set]);
        assert!(text.contains(&format!("({mode} mode)")), "{text}");
        assert!(
            text.contains("--clusterrole=hf-holdfast-hold-caller --serviceaccount=TEAM:SUPERVISOR"),
            "{text}"
        );
        assert!(text.contains("with rbac.holdCallerBindings"), "{text}");
        assert!(
            text.contains("https://hf-holdfast-controller.holdfast-system.svc:8443"),
            "{text}"
        );
        assert!(text.contains("kubectl holdfast status -n TEAM"), "{text}");
        assert_eq!(
            text.contains("AdmissionCheck hf-holdfast-readmission"),
            mode == "kueue",
            "{text}"
        );

        let bound = notes(&[
            &mode_set,
            "rbac.holdCallerBindings[0].namespace=team-a",
            "rbac.holdCallerBindings[0].subjects[0].kind=ServiceAccount",
            "rbac.holdCallerBindings[0].subjects[0].name=supervisor",
            "rbac.holdCallerBindings[1].namespace=team-b",
            "rbac.holdCallerBindings[1].subjects[0].kind=ServiceAccount",
            "rbac.holdCallerBindings[1].subjects[0].name=supervisor",
        ]);
        assert!(
            bound.contains("as rbac.holdCallerBindings does now for\nteam-a, team-b"),
            "{bound}"
        );

        let other_port = notes(&[&mode_set, "controller.apiPort=9443"]);
        assert!(
            other_port.contains("https://hf-holdfast-controller.holdfast-system.svc:9443"),
            "{other_port}"
        );

        let no_finder = notes(&[&mode_set, "rbac.holdApiFinder=false"]);
        assert!(
            no_finder.contains(
                "kubectl holdfast --server https://hf-holdfast-controller.holdfast-system.svc:8443"
            ),
            "{no_finder}"
        );

        let no_role = notes(&[&mode_set, "rbac.holdCallerRole=false"]);
        assert!(
            no_role.contains("no ClusterRole lets anyone call the hold API"),
            "{no_role}"
        );
        assert!(!no_role.contains("create rolebinding"), "{no_role}");
    }
}

/// Chart.yaml carries Artifact Hub's annotations (its image the one the chart renders, its
/// links well-formed) and a `kubeVersion` whose floor is the oldest Kubernetes the suite
/// runs on (tests/cluster/matrix/oldest): helm refuses the minor below it.
#[test]
fn chart_metadata_has_artifact_hub_annotations_and_the_oldest_tested_kubernetes_as_floor() {
    let chart = chart_yaml();
    let annotations = &chart["annotations"];
    assert_eq!(annotations["artifacthub.io/license"], "Apache-2.0");
    for key in [
        "artifacthub.io/category",
        "artifacthub.io/prerelease",
        "artifacthub.io/containsSecurityUpdates",
    ] {
        assert!(annotations[key].is_string(), "{key}");
    }
    let images: Value = serde_saphyr::from_str(
        annotations["artifacthub.io/images"]
            .as_str()
            .expect("artifacthub.io/images"),
    )
    .expect("artifacthub.io/images is YAML");
    let docs = helm()
        .render(&helm::Install::new("hf", "holdfast-system"))
        .expect("render");
    let rendered = helm::of_kind(&docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"]
        [0]["image"]
        .clone();
    assert_eq!(images[0]["image"], rendered, "{images}");
    let links: Value = serde_saphyr::from_str(
        annotations["artifacthub.io/links"]
            .as_str()
            .expect("artifacthub.io/links"),
    )
    .expect("artifacthub.io/links is YAML");
    for link in links.as_array().expect("links") {
        assert!(link["name"].is_string(), "{link}");
        assert!(
            link["url"]
                .as_str()
                .is_some_and(|u| u.starts_with("https://github.com/holdfast-dev/holdfast/")),
            "{link}"
        );
    }

    let env = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster/matrix/oldest/versions.env"),
    )
    .expect("the oldest matrix entry");
    let oldest = env
        .lines()
        .find_map(|l| l.strip_prefix("KUBERNETES_VERSION=v"))
        .expect("KUBERNETES_VERSION");
    let minor: Vec<&str> = oldest.split('.').take(2).collect();
    assert_eq!(
        chart["kubeVersion"],
        format!(">={}.0-0", minor.join(".")),
        "the oldest tested is {oldest}"
    );
    let at = |version: &str| {
        helm().run(&[
            "template".into(),
            "hf".into(),
            helm::chart_dir().display().to_string(),
            "--kube-version".into(),
            version.into(),
        ])
    };
    at(oldest).expect("the oldest tested Kubernetes is accepted");
    let below = format!(
        "{}.{}.0",
        minor[0],
        minor[1].parse::<u32>().expect("minor") - 1
    );
    let e = format!("{:#}", at(&below).expect_err("the minor below is refused"));
    assert!(e.contains("kubeVersion"), "{e}");
}

/// The `helm test` objects: rendered only as `helm test` hooks (and left out by `helm template
/// --skip-tests`), running holdfast's image as `check-install` with the release's names; the
/// real apiserver admits the Pod in a namespace enforcing the restricted Pod Security level
/// (and refuses it there without the chart's securityContexts, so the level is enforced).
#[tokio::test]
async fn the_helm_test_pod_is_a_test_hook_admitted_under_restricted_pod_security() {
    let rendered = helm::documents(
        &helm()
            .template_with_tests(&helm::Install::new("hf", "holdfast-system"))
            .expect("render"),
    )
    .expect("documents");
    let installed = helm()
        .render(&helm::Install::new("hf", "holdfast-system"))
        .expect("render");
    assert!(
        installed
            .iter()
            .all(|d| d["metadata"]["annotations"]["helm.sh/hook"].is_null()),
        "what helm install applies holds no test hook"
    );
    let hooks: Vec<&Value> = rendered
        .iter()
        .filter(|d| d["metadata"]["annotations"]["helm.sh/hook"] == "test")
        .collect();
    let kinds: Vec<String> = hooks.iter().map(|d| helm::id(d)).collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount/hf-holdfast-install-check",
            "ClusterRole/hf-holdfast-install-check",
            "ClusterRoleBinding/hf-holdfast-install-check",
            "Role/hf-holdfast-install-check",
            "RoleBinding/hf-holdfast-install-check",
            "Pod/hf-holdfast-install-check",
        ]
    );
    let pod = *hooks.last().expect("the Pod");
    let container = &pod["spec"]["containers"][0];
    assert_eq!(
        container["command"],
        serde_json::json!(["/holdfast-controller", "check-install"])
    );
    assert_eq!(container["image"], "ghcr.io/holdfast-dev/holdfast:0.1.0");
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("arg").to_owned())
        .collect();
    let parsed = CheckArgs::try_parse_from(
        std::iter::once("check-install".to_owned()).chain(args.iter().cloned()),
    )
    .expect("the hook's arguments parse as check-install's");
    assert_eq!(parsed.namespace, "default");
    assert_eq!(
        parsed.hold_api,
        "https://hf-holdfast-controller.holdfast-system.svc:8443"
    );
    assert_eq!(parsed.webhook_configuration, "hf-holdfast");
    assert_eq!(
        parsed.refused_by,
        ["snapshots.validate.holdfast.dev", "hf-holdfast-snapshots"]
    );
    let skipped = helm()
        .run(&[
            "template".into(),
            "hf".into(),
            helm::chart_dir().display().to_string(),
            "--skip-tests".into(),
        ])
        .expect("helm template --skip-tests");
    assert!(!skipped.contains("install-check\n  namespace"), "{skipped}");
    assert!(!skipped.contains("kind: Pod\n"), "{skipped}");

    let cp = ControlPlane::shared();
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let ns = cp.namespace("restricted").await.expect("namespace");
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let mut labelled = namespaces.get(&ns).await.expect("namespace");
    labelled
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(
            "pod-security.kubernetes.io/enforce".into(),
            "restricted".into(),
        );
    namespaces
        .replace(&ns, &PostParams::default(), &labelled)
        .await
        .expect("label the namespace restricted");
    let mut pod: Pod = serde_json::from_value(pod.clone()).expect("a Pod");
    pod.metadata = ObjectMeta {
        name: pod.metadata.name.clone(),
        namespace: Some(ns.clone()),
        ..Default::default()
    };
    // No ServiceAccount of that name in this namespace: the Pod is judged, not run.
    pod.spec.as_mut().expect("spec").service_account_name = None;
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let pods: Api<Pod> = Api::namespaced(admin, &ns);
    pods.create(&dry, &pod)
        .await
        .expect("the restricted level admits the hook's Pod");
    let mut loose = pod.clone();
    let spec = loose.spec.as_mut().expect("spec");
    spec.security_context = None;
    spec.containers[0].security_context = None;
    let refused = pods.create(&dry, &loose).await.expect_err("refused");
    assert!(format!("{refused}").contains("PodSecurity"), "{refused}");
}

/// The hook's check passes where holdfast's webhook refuses the snapshot write and the hold
/// API answers the status call; it fails, naming the cause, where the webhooks do not cover
/// the namespace (the write is let through), where the caller may not ask the status (403),
/// and where nothing serves the hold API.
#[tokio::test]
async fn the_install_check_passes_where_holdfast_protects_and_serves_and_names_what_fails() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("install-check").await.expect("namespace");
    let hook = InProcessWebhook::start(cp, Mode::Plain, false)
        .await
        .expect("webhook starts");
    register_webhook(cp, &ns, hook.port(), 5).await;
    let api = start_api(cp, executor(cp).await).await;

    let apiserver = cp.client(Identity::User).await.expect("alice");
    let kubeconfig =
        kube::config::Kubeconfig::read_from(cp.kubeconfig(Identity::User)).expect("kubeconfig");
    let base = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("alice's config");
    let ca = cp.ca_pem().as_bytes().to_vec();
    let hold_api = |url: &str| {
        kube::Client::try_from(install_check::hold_api_config(&base, url, &ca).expect("config"))
            .expect("client")
    };
    let args = |ns: &str, url: &str, trainjob: &str| CheckArgs {
        namespace: ns.into(),
        hold_api: url.into(),
        webhook_configuration: "unused: the CA is given".into(),
        refused_by: vec!["snapshots.validate.holdfast.dev".into()],
        trainjob: trainjob.into(),
    };
    let check = |ns: &str, url: &str, trainjob: &str| {
        let a = args(ns, url, trainjob);
        let (s, h) = (apiserver.clone(), hold_api(url));
        async move { install_check::check(&a, s, h).await }
    };
    let run = |ns: &str, url: &str| check(ns, url, "holdfast-install-check");

    // alice may not ask the status yet: the hold API answers, but 403 (another TrainJob's
    // name: the hold API remembers a review's answer for a while).
    let e = format!(
        "{:#}",
        check(&ns, &api.base, "before-the-grant")
            .await
            .expect_err("403")
    );
    assert!(e.contains("with 403"), "{e}");

    grant_alice(cp, &ns, &["status"], &["get"]).await;
    let seen = run(&ns, &api.base).await.expect("the check passes");
    assert!(
        seen[0].starts_with("protects:") && seen[0].contains("snapshots.validate.holdfast.dev"),
        "{seen:?}"
    );
    assert!(
        seen[1].contains(&format!(
            "GET /v1/namespaces/{ns}/trainjobs/holdfast-install-check/status with 404"
        )),
        "{seen:?}"
    );

    // A namespace the webhooks do not cover: the write is let through.
    let uncovered = cp.namespace("install-check-off").await.expect("namespace");
    let e = format!(
        "{:#}",
        run(&uncovered, &api.base).await.expect_err("let through")
    );
    assert!(e.contains("was let through"), "{e}");

    // Nothing serves the hold API there.
    let port = holdfast_tests::control_plane::free_port().expect("port");
    let e = format!(
        "{:#}",
        run(&ns, &format!("https://127.0.0.1:{port}"))
            .await
            .expect_err("no hold API")
    );
    assert!(e.contains("calling the hold API"), "{e}");
}
