//! What Helm users expect of a chart beside its objects: NOTES.txt saying how to bind the
//! hold-caller role and reach the hold API, Artifact Hub's annotations, and a `kubeVersion`
//! that is the oldest Kubernetes the suite runs on.

use holdfast_tests::helm::{self, Helm};
use serde_json::Value;
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
        assert!(text.contains("webhook configuration hf-holdfast"), "{text}");
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
