//! The NetworkPolicies of the webhook and the controller, client certificates, the hold API's
//! bounds and audiences and the controller's flow control, rendered as documented and
//! accepted by the real apiserver.

use super::*;

/// The non-default values of the NetworkPolicy and of client certificates render as the
/// chart's README documents them, and the real apiserver accepts the policy.
#[tokio::test]
async fn network_policy_and_client_certificate_values_render_as_documented() {
    let helm = helm();
    let install = Install::new("holdfast", "holdfast-system")
        .set("networkPolicy.webhook.exceptCIDRs={10.244.0.0/16,fd00:10:244::/56}")
        .set("networkPolicy.webhook.extraFrom[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=kube-system")
        .set("networkPolicy.webhook.extraFrom[0].podSelector.matchLabels.k8s-app=konnectivity-agent")
        .set("networkPolicy.metrics.from[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring")
        .set("webhook.clientAuth.enabled=true")
        .set("webhook.clientAuth.caConfigMapName=apiserver-client-ca");
    helm.lint(&install).expect("lint");
    let docs = helm.render(&install).expect("render");
    let np = find(&docs, "NetworkPolicy", "-webhook");
    let rules = np["spec"]["ingress"].as_array().expect("rules");
    assert_eq!(rules.len(), 2, "{rules:?}");
    // Each except goes to the cidr of its family.
    assert_eq!(
        rules[0]["from"],
        serde_json::json!([
            {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.244.0.0/16"]}},
            {"ipBlock": {"cidr": "::/0", "except": ["fd00:10:244::/56"]}},
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
             "podSelector": {"matchLabels": {"k8s-app": "konnectivity-agent"}}}
        ])
    );
    assert_eq!(
        rules[1]["ports"],
        serde_json::json!([{"port": 9091, "protocol": "TCP"}])
    );
    assert_eq!(
        rules[1]["from"],
        serde_json::json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}])
    );
    let webhook = find(&docs, "Deployment", "-webhook");
    assert_eq!(
        env_of(webhook)["HOLDFAST_CLIENT_CA_FILE"],
        "/etc/holdfast/client-ca/ca.crt"
    );
    let pod = &webhook["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "client-ca")
        .expect("the client CA volume");
    assert_eq!(volume["configMap"]["name"], "apiserver-client-ca");
    assert!(
        pod["containers"][0]["volumeMounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .any(|m| m["name"] == "client-ca" && m["mountPath"] == "/etc/holdfast/client-ca")
    );

    // The real apiserver accepts the policy (an except must lie inside its cidr).
    let cp = ControlPlane::shared();
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let ns = cp.namespace("hf-netpol").await.expect("namespace");
    let mut np = np.clone();
    np["metadata"]["namespace"] = serde_json::json!(ns);
    let stored = rbac::apply(&admin, &np, &ns, false)
        .await
        .expect("apply the NetworkPolicy");
    assert!(stored.metadata.uid.is_some());

    // Off: no policy. Nothing allowed in at all would lock the apiserver out: refused.
    let off = helm
        .render(&Install::new("holdfast", "holdfast-system").set("networkPolicy.enabled=false"))
        .expect("render");
    assert!(helm::of_kind(&off, "NetworkPolicy").is_empty());
    let err = helm
        .template(
            &Install::new("holdfast", "holdfast-system").set("networkPolicy.webhook.cidrs=null"),
        )
        .expect_err("no source for the apiserver");
    assert!(
        format!("{err:#}").contains("the apiserver could not reach the webhook"),
        "{err:#}"
    );
}

/// The controller's NetworkPolicy: by default nothing but the node and port-forwards reach the
/// controller pods (an empty `ingress`); `networkPolicy.holdApi.from` admits the supervisors to
/// the hold API port and `networkPolicy.metrics.from` the scraper to the admin port. The hold
/// API's bounds and token audiences reach the controller's flags; the chart's FlowSchemas put
/// the controller ServiceAccount's reviews and its other requests on two priority levels. The
/// real apiserver accepts all of them.
#[tokio::test]
async fn the_controller_network_policy_bounds_audiences_and_flow_control_render_as_documented() {
    let helm = helm();
    let defaults = helm
        .render(&Install::new("holdfast", "holdfast-system"))
        .expect("render");
    let np = find(&defaults, "NetworkPolicy", "-controller");
    assert_eq!(np["spec"]["policyTypes"], serde_json::json!(["Ingress"]));
    // No pod admitted by default but the release's own `helm test` pod, to the hold API.
    assert_eq!(
        np["spec"]["ingress"],
        serde_json::json!([{
            "ports": [{"port": 8443, "protocol": "TCP"}],
            "from": [{"podSelector": {"matchLabels": {
                "app.kubernetes.io/name": "holdfast",
                "app.kubernetes.io/instance": "holdfast",
                "app.kubernetes.io/component": "install-check",
            }}}],
        }]),
        "no pod admitted by default but the install check"
    );
    let args = controller_args_from_rendered(&defaults);
    let (connections, api) = args.hold_api.limits();
    assert_eq!(connections, holdfast_controller::args::HOLD_API_LIMITS);
    assert_eq!(api, holdfast_controller::api::ApiLimits::DEFAULT);
    assert!(args.hold_api.audiences().is_empty());

    let install = Install::new("holdfast", "holdfast-system")
        .set("networkPolicy.holdApi.from[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=dispatch")
        .set("networkPolicy.holdApi.from[1].ipBlock.cidr=192.0.2.0/24")
        .set("networkPolicy.metrics.from[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring")
        .set("controller.tokenAudiences={holdfast,https://kubernetes.default.svc}")
        .set("controller.apiLimits.maxProvisionalConnections=100")
        .set("controller.apiLimits.maxReviewsInFlight=4")
        .set("controller.apiLimits.bodyReadTimeout=2s");
    helm.lint(&install).expect("lint");
    let docs = helm.render(&install).expect("render");
    let np = find(&docs, "NetworkPolicy", "-controller");
    let rules = &np["spec"]["ingress"].as_array().expect("rules")[1..];
    assert_eq!(rules.len(), 2, "{rules:?}");
    assert_eq!(
        rules[0]["ports"],
        serde_json::json!([{"port": 8443, "protocol": "TCP"}])
    );
    assert_eq!(
        rules[0]["from"],
        serde_json::json!([
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "dispatch"}}},
            {"ipBlock": {"cidr": "192.0.2.0/24"}}
        ])
    );
    assert_eq!(
        rules[1]["ports"],
        serde_json::json!([{"port": 9090, "protocol": "TCP"}])
    );
    let args = controller_args_from_rendered(&docs);
    let (connections, api) = args.hold_api.limits();
    assert_eq!(connections.admission.map(|a| a.max_provisional), Some(100));
    assert_eq!(api.max_reviews_in_flight, 4);
    assert_eq!(api.body_read_timeout, Duration::from_secs(2));
    assert_eq!(
        args.hold_api.audiences(),
        ["holdfast", "https://kubernetes.default.svc"]
    );

    // Flow control: the reviews first, everything else of the controller next, each on its
    // own level; both match the controller's ServiceAccount, before service-accounts (9000).
    let schemas = helm::of_kind(&docs, "FlowSchema");
    let levels = helm::of_kind(&docs, "PriorityLevelConfiguration");
    assert_eq!((schemas.len(), levels.len()), (2, 2));
    let reviews = find(&docs, "FlowSchema", "-controller-reviews");
    let rest = find(&docs, "FlowSchema", "holdfast-controller");
    assert_eq!(reviews["spec"]["matchingPrecedence"], 1000);
    assert_eq!(rest["spec"]["matchingPrecedence"], 1001);
    for fs in [reviews, rest] {
        assert_eq!(
            fs["spec"]["rules"][0]["subjects"],
            serde_json::json!([{"kind": "ServiceAccount", "serviceAccount": {"namespace": "holdfast-system", "name": "holdfast-controller"}}])
        );
    }
    let reviewed: Vec<&str> = reviews["spec"]["rules"][0]["resourceRules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["resources"][0].as_str())
        .collect();
    assert_eq!(reviewed, ["tokenreviews", "subjectaccessreviews"]);
    let off = helm
        .render(
            &Install::new("holdfast", "holdfast-system")
                .set("controller.flowControl.enabled=false"),
        )
        .expect("render");
    assert!(helm::of_kind(&off, "FlowSchema").is_empty());

    // The real apiserver accepts them (server-side dry run: the shared control plane's
    // priority and fairness is left alone).
    let cp = ControlPlane::shared();
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let ns = cp.namespace("hf-ctrl-netpol").await.expect("namespace");
    let mut np = np.clone();
    np["metadata"]["namespace"] = serde_json::json!(ns);
    for doc in std::iter::once(&np).chain(levels).chain(schemas) {
        rbac::apply(&admin, doc, &ns, true)
            .await
            .unwrap_or_else(|e| panic!("the apiserver accepts {}: {e:#}", doc["kind"]));
    }
}
