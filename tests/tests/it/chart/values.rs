//! What the chart renders and refuses, with no cluster: every documented values combination
//! lints and renders, a wrong value fails at install naming it, the availability defaults and
//! the conventions render as documented, and the book's values table is `values.yaml`'s.

use super::*;

/// The properties every Deployment must have, whatever the values.
fn check_deployment(d: &Value) {
    let what = helm::id(d);
    assert_eq!(d["spec"]["replicas"], 2, "{what}: two replicas");
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{what}");
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
        "{what}"
    );
    assert!(
        pod["affinity"]["podAntiAffinity"].is_object(),
        "{what}: anti-affinity"
    );
    let containers = pod["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1, "{what}");
    let c = &containers[0];
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
    assert_eq!(sc["runAsNonRoot"], true, "{what}");
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{what}");
    assert_eq!(strs(&sc["capabilities"]["drop"]), ["ALL"], "{what}");
    assert!(
        c["resources"]["requests"]["cpu"].is_string()
            && c["resources"]["requests"]["memory"].is_string(),
        "{what}: resource requests"
    );
    assert!(
        c["readinessProbe"].is_object() && c["livenessProbe"].is_object(),
        "{what}"
    );
}

fn rules_of(role: &Value) -> Vec<&Value> {
    role["rules"]
        .as_array()
        .map(|r| r.iter().collect())
        .unwrap_or_default()
}

fn grants(role: &Value, group: &str, resource: &str) -> bool {
    rules_of(role).iter().any(|r| {
        strs(&r["apiGroups"]).contains(&group) && strs(&r["resources"]).contains(&resource)
    })
}

#[test]
fn helm_lint_and_template_pass_for_every_documented_values_combination() {
    let helm = helm();
    let (_dir, ca_path, ca_pem) = ca_file();
    for combo in Combo::all() {
        let install = combo.install("holdfast", "holdfast-system", &ca_path);
        helm.lint(&install)
            .unwrap_or_else(|e| panic!("{combo:?}: lint: {e:#}"));
        let docs = helm
            .render(&install)
            .unwrap_or_else(|e| panic!("{combo:?}: template: {e:#}"));
        let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        let count = |k: &str| kinds.iter().filter(|x| **x == k).count();

        // Both components, each with its PDB, ServiceAccount and Service.
        assert_eq!(count("Deployment"), 2, "{combo:?}");
        assert_eq!(count("PodDisruptionBudget"), 2, "{combo:?}");
        assert_eq!(count("ServiceAccount"), 2, "{combo:?}");
        assert_eq!(count("Service"), 2, "{combo:?}");
        for d in helm::of_kind(&docs, "Deployment") {
            check_deployment(d);
        }
        assert_eq!(count("ValidatingWebhookConfiguration"), 1, "{combo:?}");
        assert_eq!(count("MutatingWebhookConfiguration"), 1, "{combo:?}");
        // Helm never owns a Secret: self-managed ones are the controller's, the others are
        // cert-manager's or the user's.
        assert_eq!(count("Secret"), 0, "{combo:?}");
        assert_eq!(
            count("AdmissionCheck"),
            usize::from(combo.mode == "kueue"),
            "{combo:?}"
        );
        assert_eq!(
            count("ServiceMonitor"),
            usize::from(combo.service_monitor),
            "{combo:?}"
        );
        assert_eq!(
            count("Certificate") > 0,
            combo.certs == "cert-manager",
            "{combo:?}"
        );

        // The webhook's identities and mode, as its flags' environment variables.
        let webhook = find(&docs, "Deployment", "-webhook");
        let env = env_of(webhook);
        assert_eq!(env["HOLDFAST_MODE"], combo.mode);
        // Its limits (README, "Flood protection"), and no client certificates by default.
        assert_eq!(env["HOLDFAST_MAX_CONCURRENT"], "64");
        assert_eq!(env["HOLDFAST_BODY_READ_TIMEOUT"], "2s");
        assert_eq!(env["HOLDFAST_MAX_CONNECTIONS"], "512");
        assert_eq!(env["HOLDFAST_MAX_CONNECTIONS_PER_IP"], "32");
        assert_eq!(env["HOLDFAST_MAX_LOOKUPS"], "16");
        assert!(!env.contains_key("HOLDFAST_CLIENT_CA_FILE"), "{combo:?}");
        // The NetworkPolicies, on by default: the webhook port from any address (the apiserver,
        // wherever it calls from), the metrics port from nobody but the node; the controller's
        // (its own test below).
        assert_eq!(count("NetworkPolicy"), 2, "{combo:?}");
        let np = find(&docs, "NetworkPolicy", "-webhook");
        assert_eq!(
            np["spec"]["podSelector"]["matchLabels"], webhook["spec"]["selector"]["matchLabels"],
            "the policy selects the webhook pods"
        );
        assert_eq!(strs(&np["spec"]["policyTypes"]), ["Ingress"]);
        let rules = np["spec"]["ingress"].as_array().expect("ingress rules");
        assert_eq!(rules.len(), 1, "only the webhook port: {rules:?}");
        assert_eq!(
            rules[0]["ports"],
            serde_json::json!([{"port": 9443, "protocol": "TCP"}])
        );
        assert_eq!(
            rules[0]["from"],
            serde_json::json!([{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}])
        );
        assert_eq!(
            env["HOLDFAST_CONTROLLER_USERS"],
            "system:serviceaccount:holdfast-system:holdfast-controller"
        );
        assert_eq!(
            env["HOLDFAST_SNAPSHOT_CREATORS"],
            "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager"
        );
        assert!(env["HOLDFAST_KUEUE_USERS"].contains("kueue-controller-manager"));
        let controller = find(&docs, "Deployment", "-controller");
        let cenv = env_of(controller);
        assert_eq!(cenv["HOLDFAST_APISERVER_REQUEST_TIMEOUT"], "60s");
        // The namespaces admission does not judge (a Hold there is Unsupported), and the
        // validation engine (preflight probes the policies under policy and both).
        assert!(
            cenv["HOLDFAST_UNPROTECTED_NAMESPACES"].starts_with("kube-system,"),
            "{combo:?}"
        );
        assert_eq!(cenv["HOLDFAST_VALIDATION_ENGINE"], "webhook", "{combo:?}");
        // Every variable either Deployment sets is a flag of its binary, and parses.
        let webhook_args = webhook_args_from_rendered(&docs);
        assert_eq!(webhook_args.limits(), holdfast_webhook::Limits::DEFAULT);
        controller_args_from_rendered(&docs)
            .configs()
            .unwrap_or_else(|e| panic!("{combo:?}: the controller's flags: {e:#}"));
        assert_eq!(
            cenv["HOLDFAST_CERT_MODE"],
            if combo.certs == "self-managed" {
                "self-managed"
            } else {
                "external"
            }
        );

        // The caBundle: only the secret mode templates it.
        let vwc = find(&docs, "ValidatingWebhookConfiguration", "holdfast");
        assert_disarmed(vwc);
        let vwc = &armed(vwc);
        for hook in vwc["webhooks"].as_array().expect("webhooks") {
            // Once armed, the best-effort entries and the probe's always Ignore (see
            // protected_webhook_entries_render_disarmed_and_once_armed_follow_failure_policy).
            let best_effort = [
                "probe.validate.holdfast.dev",
                "queues.validate.holdfast.dev",
                "kueue-unsuspend.validate.holdfast.dev",
            ]
            .contains(&hook["name"].as_str().unwrap_or_default());
            assert_eq!(
                hook["failurePolicy"],
                if best_effort { "Ignore" } else { "Fail" }
            );
            assert_eq!(hook["sideEffects"], "None");
            assert!(hook["matchConditions"].is_array());
            let bundle = &hook["clientConfig"]["caBundle"];
            if combo.certs == "secret" {
                let expected =
                    serde_json::to_value(k8s_openapi::ByteString(ca_pem.as_bytes().to_vec()))
                        .expect("b64");
                assert_eq!(bundle, &expected, "{combo:?}");
            } else {
                assert!(bundle.is_null(), "{combo:?}: {bundle}");
            }
        }
        let injects = vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].as_str();
        assert_eq!(
            injects,
            (combo.certs == "cert-manager").then_some("holdfast-system/holdfast-webhook"),
            "{combo:?}"
        );

        // Least privilege follows the values.
        let role = find(&docs, "ClusterRole", "holdfast-controller");
        // Workloads in both modes (plain: a hold left from kueue mode is released on its
        // Workload); the readmission gate's status writes in kueue mode only.
        assert!(grants(role, "kueue.x-k8s.io", "workloads"), "{combo:?}");
        assert_eq!(
            grants(role, "kueue.x-k8s.io", "workloads/status"),
            combo.mode == "kueue",
            "{combo:?}"
        );
        // Its own webhook configurations, every certificate mode: it arms them.
        assert!(
            grants(
                role,
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations"
            ),
            "{combo:?}"
        );
        let ns_role = find(&docs, "Role", "holdfast-controller");
        assert_eq!(
            grants(ns_role, "", "secrets"),
            combo.certs == "self-managed",
            "{combo:?}"
        );
    }
}

#[test]
fn a_wrong_value_fails_at_install_with_a_message_naming_it() {
    let helm = helm();
    let cases = [
        ("mode=suspend", "/mode"),
        ("certs.mode=vault", "/certs/mode"),
        ("webhook.failurePolicy=Retry", "/webhook/failurePolicy"),
        ("timeouts.apiserverRequest=1h", "/timeouts/apiserverRequest"),
        ("timeouts.webhook=60", "/timeouts/webhook"),
        ("controller.replicas=0", "/controller/replicas"),
        ("webhook.replicaz=2", "replicaz"),
        (
            "certs.selfManaged.servingValidity=90 days",
            "/certs/selfManaged/servingValidity",
        ),
        (
            "kueue.admissionCheck.apiVersion=kueue.x-k8s.io/v1",
            "/kueue/admissionCheck/apiVersion",
        ),
        // The secret mode needs the Secret's name and the CA.
        ("certs.mode=secret", "/certs"),
        (
            "webhook.limits.maxConnections=0",
            "/webhook/limits/maxConnections",
        ),
        (
            "webhook.limits.bodyReadTimeout=60s",
            "/webhook/limits/bodyReadTimeout",
        ),
        // Client certificates need the CA's Secret or ConfigMap.
        ("webhook.clientAuth.enabled=true", "/webhook/clientAuth"),
        (
            "networkPolicy.webhook.exceptCIDRs={10.244.0.0}",
            "/networkPolicy/webhook/exceptCIDRs/0",
        ),
        ("validation.engine=cel", "/validation/engine"),
    ];
    for (set, names) in cases {
        let install = Install::new("holdfast", "holdfast-system").set(set);
        let err = helm
            .template(&install)
            .expect_err(&format!("--set {set} must be refused"));
        let msg = format!("{err:#}");
        assert!(msg.contains("schema"), "--set {set}: {msg}");
        assert!(
            msg.contains(names),
            "--set {set} should name {names}: {msg}"
        );
    }
    // Durations the controller parses are accepted; so are seconds as a number.
    let ok = Install::new("holdfast", "holdfast-system")
        .set("timeouts.apiserverRequest=90")
        .set("certs.selfManaged.servingValidity=30d");
    let docs = helm.render(&ok).expect("valid values");
    let env = env_of(find(&docs, "Deployment", "-controller"));
    assert_eq!(env["HOLDFAST_APISERVER_REQUEST_TIMEOUT"], "90s");
    let ok = Install::new("holdfast", "holdfast-system").set("timeouts.apiserverRequest=2m");
    let env = env_of(find(
        &helm.render(&ok).expect("2m"),
        "Deployment",
        "-controller",
    ));
    assert_eq!(env["HOLDFAST_APISERVER_REQUEST_TIMEOUT"], "2m");
    let args = controller_args_from_rendered(&helm.render(&ok).expect("2m"));
    assert_eq!(args.apiserver_request_timeout, Duration::from_secs(120));
}

#[test]
fn webhook_availability_defaults_render_as_documented() {
    let helm = helm();
    let docs = helm
        .render(&Install::new("holdfast", "holdfast-system"))
        .expect("render");
    let spec = &find(&docs, "Deployment", "-webhook")["spec"];
    assert_eq!(spec["replicas"], 2);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    let spread = &pod["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(spread["whenUnsatisfiable"], "ScheduleAnyway");
    assert_eq!(
        spread["labelSelector"]["matchLabels"], spec["selector"]["matchLabels"],
        "the spread counts the webhook's own pods"
    );
    let pdb = find(&docs, "PodDisruptionBudget", "-webhook");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    let quota = find(&docs, "ResourceQuota", "-critical-pods");
    assert_eq!(
        quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"],
        serde_json::json!(["system-cluster-critical"])
    );

    // Opting out: no class, no quota; the user's own constraints replace the zone spread.
    let docs = helm
        .render(
            &Install::new("holdfast", "holdfast-system")
                .set("webhook.priorityClassName=")
                .set("webhook.topologySpreadConstraints[0].maxSkew=2")
                .set("webhook.topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname")
                .set("webhook.topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule"),
        )
        .expect("render");
    let pod = &find(&docs, "Deployment", "-webhook")["spec"]["template"]["spec"];
    assert!(pod.get("priorityClassName").is_none());
    assert_eq!(
        pod["topologySpreadConstraints"],
        serde_json::json!([{"maxSkew": 2, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule"}])
    );
    assert!(helm::of_kind(&docs, "ResourceQuota").is_empty());
}

/// The values table of the book's reference page (`docs/src/reference/values.md`) is what
/// `values.yaml` says, so the two cannot drift. `HOLDFAST_BLESS=1` rewrites the table instead
/// of comparing.
#[test]
fn the_chart_readme_values_table_is_generated_from_values_yaml() {
    use holdfast_tests::values_table;
    let dir = holdfast_tests::helm::chart_dir();
    let values = std::fs::read_to_string(dir.join("values.yaml")).expect("values.yaml");
    let rows = values_table::rows(&values).expect("values.yaml reads");
    // Every top-level value is in the table.
    let top: serde_json::Map<String, Value> =
        serde_saphyr::from_str(&values).expect("values.yaml parses");
    for key in top.keys() {
        assert!(
            rows.iter()
                .any(|r| r.key == *key || r.key.starts_with(&format!("{key}."))),
            "{key} has no row"
        );
    }
    let readme_path = dir.join("../../docs/src/reference/values.md");
    let readme = std::fs::read_to_string(&readme_path).expect("the book's values page");
    let want = values_table::replace(&readme, &values_table::markdown(&rows)).expect("markers");
    if std::env::var_os("HOLDFAST_BLESS").is_some() {
        std::fs::write(&readme_path, &want).expect("rewrite the values page");
        return;
    }
    assert!(
        want == readme,
        "the values table of docs/src/reference/values.md differs from values.yaml; run\n  HOLDFAST_BLESS=1 cargo test -p holdfast-tests --test it -- chart::values::the_chart_readme_values_table\n"
    );
}

/// The conventions the Kueue and Trainer charts' users rely on (issue #18 item 4), rendered:
/// `image.registry`, `commonLabels` on every object, service accounts supplied by the user
/// (and their user name the controller identity everywhere), probes and the controller's
/// startup probe, `hostNetwork`, extra volumes and `envFrom`, the rollout strategy and grace
/// period, and per-namespace hold-caller RoleBindings.
#[test]
fn chart_conventions_render_as_documented() {
    let helm = helm();
    let install = helm::Install::new("hf", "holdfast-system")
        .set("mode=kueue")
        .set("image.registry=registry.example/mirror/")
        .set("image.repository=holdfast/holdfast")
        .set("image.tag=1.2.3")
        .set("commonLabels.team=ml-platform")
        .set("controller.serviceAccount.create=false")
        .set("controller.serviceAccount.name=ctl-sa")
        .set("webhook.hostNetwork=true")
        .set("webhook.terminationGracePeriodSeconds=45")
        .set("controller.strategy.type=Recreate")
        .set("controller.startupProbe.failureThreshold=90")
        .set("webhook.envFrom[0].configMapRef.name=proxy-env")
        .set("controller.extraVolumes[0].name=extra")
        .set("controller.extraVolumes[0].emptyDir.medium=Memory")
        .set("controller.extraVolumeMounts[0].name=extra")
        .set("controller.extraVolumeMounts[0].mountPath=/extra")
        .set("rbac.holdCallerBindings[0].namespace=team-a")
        .set("rbac.holdCallerBindings[0].subjects[0].kind=ServiceAccount")
        .set("rbac.holdCallerBindings[0].subjects[0].name=dispatch")
        .set("rbac.holdCallerBindings[0].subjects[0].namespace=team-a");
    let docs = helm.render(&install).expect("render");
    for d in &docs {
        assert_eq!(
            d["metadata"]["labels"]["team"],
            "ml-platform",
            "{} lacks commonLabels",
            helm::id(d)
        );
    }
    let controller = find(&docs, "Deployment", "-controller");
    let webhook = find(&docs, "Deployment", "-webhook");
    for d in [controller, webhook] {
        check_deployment(d);
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["image"],
            "registry.example/mirror/holdfast/holdfast:1.2.3"
        );
        // Selectors stay as they were: commonLabels would make a Deployment's selector
        // immutable-changing on upgrade.
        assert!(d["spec"]["selector"]["matchLabels"]["team"].is_null());
    }
    // The controller's service account is the user's: not rendered, used by the pod and the
    // bindings, and its user name is the controller identity of the webhook and policies.
    let accounts: Vec<&str> = helm::of_kind(&docs, "ServiceAccount")
        .iter()
        .filter_map(|a| a["metadata"]["name"].as_str())
        .collect();
    assert_eq!(accounts, ["hf-holdfast-webhook"]);
    let cpod = &controller["spec"]["template"]["spec"];
    assert_eq!(cpod["serviceAccountName"], "ctl-sa");
    let user = "system:serviceaccount:holdfast-system:ctl-sa";
    assert_eq!(env_of(webhook)["HOLDFAST_CONTROLLER_USERS"], user);
    let bound: Vec<&Value> = ["ClusterRoleBinding", "RoleBinding"]
        .iter()
        .flat_map(|k| helm::of_kind(&docs, k))
        .filter(|b| {
            b["roleRef"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-controller"))
        })
        .collect();
    assert!(!bound.is_empty());
    for b in bound {
        assert_eq!(b["subjects"][0]["name"], "ctl-sa", "{}", helm::id(b));
    }
    let vwc = find(&docs, "ValidatingWebhookConfiguration", "hf-holdfast");
    assert!(
        serde_json::to_string(vwc).expect("json").contains(user),
        "the match conditions name the controller by its service account"
    );
    assert!(
        !serde_json::to_string(vwc)
            .expect("json")
            .contains("serviceaccount:holdfast-system:hf-holdfast-controller")
    );
    // Probes, strategy, grace, volumes.
    let cc = &cpod["containers"][0];
    assert_eq!(cc["startupProbe"]["failureThreshold"], 90);
    assert_eq!(cc["startupProbe"]["httpGet"]["path"], "/livez");
    assert_eq!(controller["spec"]["strategy"]["type"], "Recreate");
    assert!(cpod["volumes"].as_array().is_some_and(|v| {
        v.iter()
            .any(|v| v["name"] == "extra" && v["emptyDir"]["medium"] == "Memory")
    }));
    assert!(cc["volumeMounts"].as_array().is_some_and(|v| {
        v.iter()
            .any(|m| m["name"] == "extra" && m["mountPath"] == "/extra")
    }));
    let wpod = &webhook["spec"]["template"]["spec"];
    assert_eq!(wpod["hostNetwork"], true);
    assert_eq!(wpod["dnsPolicy"], "ClusterFirstWithHostNet");
    assert_eq!(wpod["terminationGracePeriodSeconds"], 45);
    assert_eq!(
        webhook["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
        0
    );
    assert_eq!(
        wpod["containers"][0]["envFrom"][0]["configMapRef"]["name"],
        "proxy-env"
    );
    // Tenant delegation: the hold-caller ClusterRole bound in team-a only.
    let rb = helm::of_kind(&docs, "RoleBinding")
        .into_iter()
        .find(|b| b["roleRef"]["name"] == "hf-holdfast-hold-caller")
        .expect("the hold-caller RoleBinding");
    assert_eq!(rb["metadata"]["namespace"], "team-a");
    assert_eq!(rb["roleRef"]["kind"], "ClusterRole");
    assert_eq!(rb["subjects"][0]["name"], "dispatch");
    // Two bindings in one namespace are two objects.
    let twice = helm
        .render(
            &install
                .clone()
                .set("rbac.holdCallerBindings[1].namespace=team-a")
                .set("rbac.holdCallerBindings[1].subjects[0].kind=User")
                .set("rbac.holdCallerBindings[1].subjects[0].name=bob"),
        )
        .expect("two bindings");
    let names: Vec<&str> = helm::of_kind(&twice, "RoleBinding")
        .iter()
        .filter(|b| b["roleRef"]["name"] == "hf-holdfast-hold-caller")
        .filter_map(|b| b["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["hf-holdfast-hold-caller-0", "hf-holdfast-hold-caller-1"]
    );
    // The same subjects may find the hold API (`kubectl holdfast` without --server): the
    // finder Role in the release namespace (the Lease by name only) and the webhook
    // configuration's caBundle by name only, both bound to every holdCallerBindings subject.
    let finder = helm::of_kind(&twice, "Role")
        .into_iter()
        .find(|r| r["metadata"]["name"] == "hf-holdfast-hold-api-finder")
        .expect("the finder Role");
    let rules = finder["rules"].as_array().expect("rules");
    assert!(rules.iter().any(
        |r| r["resources"] == serde_json::json!(["pods/portforward"])
            && r["verbs"] == serde_json::json!(["get", "create"])
    ));
    assert!(
        rules
            .iter()
            .any(|r| r["resources"] == serde_json::json!(["leases"])
                && r["resourceNames"] == serde_json::json!(["hf-holdfast-controller"]))
    );
    let ca = helm::of_kind(&twice, "ClusterRole")
        .into_iter()
        .find(|r| r["metadata"]["name"] == "hf-holdfast-hold-api-ca")
        .expect("the CA ClusterRole");
    assert_eq!(
        ca["rules"][0]["resourceNames"],
        serde_json::json!(["hf-holdfast"])
    );
    assert_eq!(ca["rules"][0]["verbs"], serde_json::json!(["get"]));
    for (kind, name) in [
        ("RoleBinding", "hf-holdfast-hold-api-finder"),
        ("ClusterRoleBinding", "hf-holdfast-hold-api-ca"),
    ] {
        let binding = helm::of_kind(&twice, kind)
            .into_iter()
            .find(|b| b["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name}"));
        let subjects: Vec<&str> = binding["subjects"]
            .as_array()
            .expect("subjects")
            .iter()
            .filter_map(|s| s["name"].as_str())
            .collect();
        assert_eq!(subjects, ["dispatch", "bob"], "{kind} {name}");
    }
    let without = helm
        .render(&install.clone().set("rbac.holdApiFinder=false"))
        .expect("without the finder");
    assert!(
        helm::of_kind(&without, "Role")
            .iter()
            .all(|r| r["metadata"]["name"] != "hf-holdfast-hold-api-finder")
    );
    // Values that would hand the controller identity to others, or take the chart's own
    // labels, are refused with a message naming them.
    for (set, names) in [
        (
            "controller.serviceAccount.name=default",
            "controller.serviceAccount.name=default",
        ),
        (
            "webhook.serviceAccount.name=ctl-sa",
            "webhook.serviceAccount.name",
        ),
        (
            "commonLabels.app\\.kubernetes\\.io/instance=x",
            "commonLabels",
        ),
    ] {
        let err = helm.render(&install.clone().set(set)).expect_err(set);
        assert!(format!("{err:#}").contains(names), "{set}: {err:#}");
    }
    // Without the ClusterRole there is nothing to bind: a clear error.
    let err = helm
        .render(&install.clone().set("rbac.holdCallerRole=false"))
        .expect_err("bindings without the role");
    assert!(
        format!("{err:#}").contains("rbac.holdCallerRole=true"),
        "{err:#}"
    );
    // Defaults: the chart's own service accounts, no host network, no startup probe on the
    // webhook, the webhook's careful rollout.
    let defaults = helm
        .render(&helm::Install::new("hf", "holdfast-system"))
        .expect("render defaults");
    let accounts = helm::of_kind(&defaults, "ServiceAccount").len();
    assert_eq!(accounts, 2);
    let w = find(&defaults, "Deployment", "-webhook");
    assert!(w["spec"]["template"]["spec"]["hostNetwork"].is_null());
    assert_eq!(
        w["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
        30
    );
    assert_eq!(
        find(&defaults, "Deployment", "-controller")["spec"]["template"]["spec"]["containers"][0]["startupProbe"]
            ["httpGet"]["path"],
        "/livez"
    );
}
