//! The chart's webhook configurations as rendered: what each entry is sent, every entry
//! disarmed at install and failing as the failure policy says once armed, what the validation
//! engines move into admission policies, and the identities the match conditions name.

use super::*;

/// The entries of the chart's webhook configurations as (name, failurePolicy, match
/// condition names).
fn entries(doc: &Value) -> Vec<(String, String, Vec<String>)> {
    doc["webhooks"]
        .as_array()
        .expect("webhooks")
        .iter()
        .map(|w| {
            assert_eq!(w["sideEffects"], "None");
            assert_eq!(w["matchPolicy"], "Equivalent");
            assert_eq!(w["admissionReviewVersions"], serde_json::json!(["v1"]));
            (
                w["name"].as_str().expect("name").to_owned(),
                w["failurePolicy"]
                    .as_str()
                    .expect("failurePolicy")
                    .to_owned(),
                w["matchConditions"]
                    .as_array()
                    .expect("matchConditions")
                    .iter()
                    .map(|c| c["name"].as_str().expect("condition name").to_owned())
                    .collect(),
            )
        })
        .collect()
}

/// Each entry's rules as `(name, [(resources, operations)])`, checking every rule is
/// namespaced and names no subresource.
fn rules(doc: &Value) -> Vec<(String, Vec<(String, String)>)> {
    doc["webhooks"]
        .as_array()
        .expect("webhooks")
        .iter()
        .map(|w| {
            let rules = w["rules"].as_array().expect("rules");
            let rules = rules
                .iter()
                .map(|r| {
                    assert_eq!(r["scope"], "Namespaced", "{r}");
                    let list = |k: &str| {
                        r[k].as_array()
                            .expect("list")
                            .iter()
                            .map(|x| x.as_str().expect("string").to_owned())
                            .collect::<Vec<_>>()
                    };
                    let resources = list("resources");
                    assert!(
                        resources.iter().all(|r| !r.contains('/')),
                        "no subresource: status writes carry no state the policy reads: {r}"
                    );
                    (resources.join(","), list("operations").join(","))
                })
                .collect();
            (w["name"].as_str().expect("name").to_owned(), rules)
        })
        .collect()
}

/// What each entry is sent decides what an outage stops and what the policy sees: no DELETE
/// of TrainJobs or Workloads (the policy refuses none; the hold finalizer keeps a held
/// Workload), DELETE of ConfigMaps (snapshots), Workload CREATE only to the validating side.
#[test]
fn webhook_entries_are_sent_the_resources_and_operations_the_policy_reads() {
    let helm = helm();
    let (_dir, ca_path, _) = ca_file();
    let r = |v: &[(&str, &str)]| {
        v.iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect::<Vec<_>>()
    };
    for mode in ["plain", "kueue"] {
        let install = Combo {
            mode,
            certs: "secret",
            service_monitor: false,
        }
        .install("holdfast", "holdfast-system", &ca_path);
        let docs = helm.render(&install).expect("render");
        let v = rules(find(&docs, "ValidatingWebhookConfiguration", "holdfast"));
        let m = rules(find(&docs, "MutatingWebhookConfiguration", "holdfast"));
        let jobs = r(&[
            ("trainjobs", "CREATE,UPDATE"),
            ("workloads", "CREATE,UPDATE"),
        ]);
        let mut want_v = vec![
            (
                "probe.validate.holdfast.dev".to_owned(),
                r(&[("configmaps", "CREATE")]),
            ),
            (
                "snapshots.validate.holdfast.dev".to_owned(),
                r(&[("configmaps", "CREATE,UPDATE,DELETE")]),
            ),
            ("jobs.validate.holdfast.dev".to_owned(), jobs),
        ];
        if mode == "kueue" {
            want_v.push((
                "queues.validate.holdfast.dev".to_owned(),
                r(&[("trainjobs", "CREATE")]),
            ));
            want_v.push((
                "kueue-unsuspend.validate.holdfast.dev".to_owned(),
                r(&[("trainjobs", "UPDATE")]),
            ));
            want_v.push((
                "workload-requests.validate.holdfast.dev".to_owned(),
                r(&[("workloads", "CREATE,UPDATE")]),
            ));
        }
        assert_eq!(v, want_v, "{mode}");
        let want_m = vec![
            (
                "jobs.mutate.holdfast.dev".to_owned(),
                r(&[("trainjobs", "CREATE,UPDATE"), ("workloads", "UPDATE")]),
            ),
            (
                "records.mutate.holdfast.dev".to_owned(),
                r(&[("trainjobs", "CREATE")]),
            ),
            (
                "jobsets.mutate.holdfast.dev".to_owned(),
                r(&[("jobsets", "CREATE,UPDATE")]),
            ),
        ];
        assert_eq!(m, want_m, "{mode}");
    }
}

#[test]
fn protected_webhook_entries_render_disarmed_and_once_armed_follow_failure_policy() {
    let helm = helm();
    let (_dir, ca_path, _) = ca_file();
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    for (mode, policy) in [
        ("plain", "Fail"),
        ("kueue", "Fail"),
        ("kueue", "Ignore"),
        ("plain", "Ignore"),
    ] {
        let install = Combo {
            mode,
            certs: "secret",
            service_monitor: false,
        }
        .install("holdfast", "holdfast-system", &ca_path)
        .set(format!("webhook.failurePolicy={policy}"));
        let docs = helm.render(&install).expect("render");
        let (vdoc, mdoc) = (
            find(&docs, "ValidatingWebhookConfiguration", "holdfast"),
            find(&docs, "MutatingWebhookConfiguration", "holdfast"),
        );
        assert_disarmed(vdoc);
        assert_disarmed(mdoc);
        let v = entries(&armed(vdoc));
        let m = entries(&armed(mdoc));
        let p = policy.to_owned();
        let i = "Ignore".to_owned();
        let mut want_v = vec![
            (
                "probe.validate.holdfast.dev".to_owned(),
                i.clone(),
                s(&["the-controllers-dry-run-probe"]),
            ),
            (
                "snapshots.validate.holdfast.dev".to_owned(),
                p.clone(),
                s(&["runtime-snapshot", "not-decided-by-identity"]),
            ),
            (
                "jobs.validate.holdfast.dev".to_owned(),
                p.clone(),
                if mode == "kueue" {
                    s(&[
                        "holdfast-state",
                        "not-the-controller",
                        "kueue-only-on-holdfast-state",
                    ])
                } else {
                    s(&["holdfast-state", "not-the-controller"])
                },
            ),
        ];
        if mode == "kueue" {
            want_v.push((
                "queues.validate.holdfast.dev".to_owned(),
                i.clone(),
                s(&["queued-without-holdfast-state", "not-the-controller"]),
            ));
            want_v.push((
                "kueue-unsuspend.validate.holdfast.dev".to_owned(),
                i.clone(),
                s(&["kueue-unsuspends"]),
            ));
            want_v.push((
                "workload-requests.validate.holdfast.dev".to_owned(),
                p.clone(),
                s(&[
                    "a-trainjobs-workload",
                    "its-pods-request-nothing",
                    "created-adopted-or-its-pod-sets-or-queue-changed",
                ]),
            ));
        }
        assert_eq!(v, want_v, "{mode}, {policy}");
        assert_eq!(
            m,
            vec![
                (
                    "jobs.mutate.holdfast.dev".to_owned(),
                    p.clone(),
                    s(&["holdfast-state", "not-the-controller"])
                ),
                (
                    "records.mutate.holdfast.dev".to_owned(),
                    i.clone(),
                    s(&["without-holdfast-state"])
                ),
                (
                    "jobsets.mutate.holdfast.dev".to_owned(),
                    p.clone(),
                    s(&[
                        "a-trainjobs-jobset",
                        "created-without-failed-or-updated-dropping-it"
                    ])
                ),
            ],
            "{mode}, {policy}"
        );
    }
}

#[test]
fn validation_engine_policy_moves_the_validating_rules_into_admission_policies() {
    let helm = helm();
    let (_dir, ca_path, _) = ca_file();
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    for mode in ["plain", "kueue"] {
        let render = |engine: &str| {
            let install = Combo {
                mode,
                certs: "secret",
                service_monitor: false,
            }
            .install("holdfast", "holdfast-system", &ca_path)
            .set(format!("validation.engine={engine}"));
            helm.render(&install)
                .unwrap_or_else(|e| panic!("{mode}, {engine}: {e:#}"))
        };
        let webhook = render("webhook");
        let both = render("both");
        let policy = render("policy");
        // The execution finalizer's policy and the controller's ConfigMap policy are the same
        // under every engine (they guard pods and the controller's own ConfigMap writes,
        // which no validating rule of the webhook covers), in every namespace, and need no
        // webhook; the webhook engine renders no other policy (the default); both keeps
        // every webhook entry.
        let execution = "holdfast-execution-finalizer";
        let configmaps = "holdfast-controller-configmaps";
        for always in [execution, configmaps] {
            let always_policy = |docs: &[Value]| -> Vec<Value> {
                [
                    "ValidatingAdmissionPolicy",
                    "ValidatingAdmissionPolicyBinding",
                ]
                .into_iter()
                .map(|kind| find(docs, kind, always).clone())
                .collect()
            };
            let guarded = always_policy(&webhook);
            assert_eq!(
                guarded[0]["spec"]["failurePolicy"], "Fail",
                "{mode}, {always}"
            );
            assert!(
                guarded[0]["spec"]["matchConstraints"]["namespaceSelector"].is_null(),
                "every namespace: {mode}, {always}"
            );
            assert!(
                guarded[0]["spec"]["paramKind"].is_null(),
                "no lookups: {mode}, {always}"
            );
            assert_eq!(
                guarded[1]["spec"]["validationActions"],
                serde_json::json!(["Deny"])
            );
            assert_eq!(always_policy(&both), guarded, "{mode}, {always}");
            assert_eq!(always_policy(&policy), guarded, "{mode}, {always}");
        }
        // kueue mode: the readmission gate's policy, the same under every engine (Kueue's
        // admission of a TrainJob's Workload, which no webhook entry judges); none in plain
        // mode.
        let gate = "holdfast-readmission-gate";
        let gate_docs = |docs: &[Value]| -> Vec<Value> {
            docs.iter()
                .filter(|d| d["metadata"]["name"] == gate)
                .cloned()
                .collect()
        };
        if mode == "kueue" {
            let guarded = gate_docs(&webhook);
            assert_eq!(guarded.len(), 2, "the policy and its binding");
            assert_eq!(guarded[0]["spec"]["failurePolicy"], "Fail");
            assert!(guarded[0]["spec"]["paramKind"].is_null(), "no lookups");
            assert_eq!(gate_docs(&both), guarded);
            assert_eq!(gate_docs(&policy), guarded);
        } else {
            assert!(gate_docs(&webhook).is_empty(), "{mode}");
        }
        let rules = |docs: &[Value], kind: &str| -> Vec<Value> {
            helm::of_kind(docs, kind)
                .into_iter()
                .filter(|d| {
                    d["metadata"]["name"] != execution
                        && d["metadata"]["name"] != configmaps
                        && d["metadata"]["name"] != gate
                })
                .cloned()
                .collect()
        };
        assert!(rules(&webhook, "ValidatingAdmissionPolicy").is_empty());
        let validating = |docs: &[Value]| -> Vec<(String, String, Vec<String>)> {
            let doc = find(docs, "ValidatingWebhookConfiguration", "holdfast");
            if doc["webhooks"].as_array().is_some_and(Vec::is_empty) {
                return Vec::new();
            }
            // As the controller arms it, and without the probe's entry (every engine has it).
            let mut e = entries(&armed(doc));
            assert_eq!(
                e.first().map(|x| x.0.as_str()),
                Some("probe.validate.holdfast.dev")
            );
            e.remove(0);
            e
        };
        assert_eq!(validating(&both), validating(&webhook), "{mode}");
        // The mutating side is the webhook's whatever the engine.
        for docs in [&both, &policy] {
            assert_eq!(
                entries(find(docs, "MutatingWebhookConfiguration", "holdfast")),
                entries(find(&webhook, "MutatingWebhookConfiguration", "holdfast")),
                "{mode}"
            );
        }
        // policy: the webhook keeps only the lookups, failing closed where jobs.validate did.
        let want = if mode == "kueue" {
            vec![
                (
                    "queue-checks.validate.holdfast.dev".to_owned(),
                    "Fail".to_owned(),
                    s(&["queue-checked-and-protected", "not-the-controller"]),
                ),
                (
                    "queues.validate.holdfast.dev".to_owned(),
                    "Ignore".to_owned(),
                    s(&["queued-without-holdfast-state", "not-the-controller"]),
                ),
                (
                    "kueue-unsuspend.validate.holdfast.dev".to_owned(),
                    "Ignore".to_owned(),
                    s(&["kueue-unsuspends"]),
                ),
                (
                    "workload-requests.validate.holdfast.dev".to_owned(),
                    "Fail".to_owned(),
                    s(&[
                        "a-trainjobs-workload",
                        "its-pods-request-nothing",
                        "created-adopted-or-its-pod-sets-or-queue-changed",
                    ]),
                ),
            ]
        } else {
            vec![(
                "held-workloads.validate.holdfast.dev".to_owned(),
                "Fail".to_owned(),
                s(&["unsuspends-a-job-with-holdfast-state", "not-the-controller"]),
            )]
        };
        assert_eq!(validating(&policy), want, "{mode}");
        for docs in [&both, &policy] {
            let policies = rules(docs, "ValidatingAdmissionPolicy");
            let bindings = rules(docs, "ValidatingAdmissionPolicyBinding");
            let names: Vec<&str> = policies
                .iter()
                .filter_map(|p| p["metadata"]["name"].as_str())
                .collect();
            assert_eq!(
                names,
                [
                    "holdfast-snapshots",
                    "holdfast-trainjobs",
                    "holdfast-workloads"
                ],
                "{mode}"
            );
            for p in &policies {
                assert_eq!(p["apiVersion"], "admissionregistration.k8s.io/v1");
                assert_eq!(p["spec"]["failurePolicy"], "Fail", "{mode}");
                let excluded =
                    &p["spec"]["matchConstraints"]["namespaceSelector"]["matchExpressions"][0];
                assert_eq!(excluded["operator"], "NotIn");
                assert_eq!(
                    excluded["values"],
                    serde_json::json!(["kube-system", "holdfast-system"])
                );
            }
            let bound: Vec<(&str, &Value)> = bindings
                .iter()
                .map(|b| {
                    (
                        b["spec"]["policyName"].as_str().unwrap_or_default(),
                        &b["spec"]["validationActions"],
                    )
                })
                .collect();
            assert_eq!(
                bound,
                [
                    ("holdfast-snapshots", &serde_json::json!(["Deny"])),
                    ("holdfast-trainjobs", &serde_json::json!(["Deny"])),
                    ("holdfast-workloads", &serde_json::json!(["Deny"]))
                ],
                "{mode}"
            );
        }
    }
}

#[test]
fn match_conditions_name_the_identities_the_values_give() {
    let helm = helm();
    let (_dir, ca_path, _) = ca_file();
    let install = Combo {
        mode: "kueue",
        certs: "secret",
        service_monitor: false,
    }
    .install("hf", "ops", &ca_path)
    .set("identities.kueueUsers={system:serviceaccount:kq:kueue,kueue-admin}")
    .set("identities.extraControllerUsers={ops-robot}");
    let docs = helm.render(&install).expect("render");
    let v = find(&docs, "ValidatingWebhookConfiguration", "hf-holdfast");
    let text = v.to_string();
    assert!(
        text.contains("['system:serviceaccount:ops:hf-holdfast-controller', 'ops-robot']"),
        "the controller list: {text}"
    );
    assert!(
        text.contains("['system:serviceaccount:kq:kueue', 'kueue-admin']"),
        "the Kueue list: {text}"
    );
    let kueue_mode = || {
        Combo {
            mode: "kueue",
            certs: "secret",
            service_monitor: false,
        }
        .install("hf", "ops", &ca_path)
    };
    let err = helm
        .render(&kueue_mode().set("identities.kueueUsers={it's}"))
        .expect_err("a quote in a user name cannot be put into CEL");
    assert!(format!("{err:#}").contains("contain quotes"), "{err:#}");
    // One identity as holdfast's controller and as Kueue: the rules that keep a held or gated
    // TrainJob suspended treat the two differently, so the chart refuses the lists.
    let err = helm
        .render(
            &kueue_mode()
                .set("identities.extraControllerUsers={ops-robot}")
                .set("identities.kueueUsers={system:serviceaccount:kq:kueue,ops-robot}"),
        )
        .expect_err("a user both controller and Kueue");
    assert!(
        format!("{err:#}").contains("\"ops-robot\" is listed both as a controller user"),
        "{err:#}"
    );
    // The webhook reads the list comma-separated and trimmed: a name it would read otherwise
    // than the CEL does is refused too (by the schema; the template checks again).
    for bad in [" ops-robot", "a\\,b"] {
        let err = helm
            .render(
                &Combo {
                    mode: "plain",
                    certs: "secret",
                    service_monitor: false,
                }
                .install("hf", "ops", &ca_path)
                .set(format!("identities.extraControllerUsers[0]={bad}")),
            )
            .expect_err("a name the webhook would read differently");
        assert!(
            format!("{err:#}").contains("extraControllerUsers"),
            "{bad}: {err:#}"
        );
    }
}
