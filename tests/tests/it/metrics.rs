//! What operators look for (issue #18 item 3), scraped from the real binaries: build info,
//! process metrics, certificate expiry, the start-up migration, hold calls by outcome and
//! cause, held objects and their age, kube requests by verb and code. And the chart's
//! Grafana dashboard and alert rules: rendered by default where the cluster serves their
//! CRDs, every metric their PromQL selects exposed by the binaries, every alert's runbook a
//! section of docs/src/operating/runbooks.md.

use holdfast_certs::CertificateInfo;
use holdfast_controller::webhook_certs::{self as certs, CertConfig, ServingSecret};
use holdfast_core::names::ANN_HOLD_PLACED_AT;
use holdfast_serve::CertificateExpiry;
use holdfast_tests::helm::{self, Install};
use holdfast_tests::hold_support::{self, api::grant_alice};
use holdfast_tests::holdfast::{
    WebhookReplica, register_webhook, serving_cert, start_plain_controller,
    start_plain_controller_on, wait_readyz,
};
use holdfast_tests::objects::{create_dynamic, trainjob};
use holdfast_tests::process::Supervised;
use holdfast_tests::promql::{exposed_names, selected_names};
use holdfast_tests::scene::Scene;
use holdfast_tests::wait::wait_for;
use holdfast_tests::{ControlPlane, Identity, control_plane::free_port};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const MINUTE: Duration = Duration::from_secs(60);

/// Minimal CRDs of the Prometheus Operator kinds the chart renders.
const OPERATOR_CRDS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: prometheusrules.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: PrometheusRule, plural: prometheusrules, singular: prometheusrule, listKind: PrometheusRuleList}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: ServiceMonitor, plural: servicemonitors, singular: servicemonitor, listKind: ServiceMonitorList}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#;

/// `GET /metrics` of an admin port.
async fn scrape(admin_port: u16) -> String {
    let url = format!("http://127.0.0.1:{admin_port}/metrics");
    match reqwest::get(&url).await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// The labels of a sample line (`k="v"` pairs; our values hold no escaped quotes).
fn labels_of(line: &str) -> Vec<(String, String)> {
    let Some(open) = line.find('{') else {
        return vec![];
    };
    let Some(close) = line.rfind('}') else {
        return vec![];
    };
    line[open + 1..close]
        .split("\",")
        .filter_map(|kv| {
            let (k, v) = kv.split_once("=\"")?;
            Some((k.trim().to_owned(), v.trim_end_matches('"').to_owned()))
        })
        .collect()
}

/// The value of the sample `name` whose labels include `labels`.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            return None;
        }
        let have = labels_of(line);
        let matches = labels
            .iter()
            .all(|(k, v)| have.iter().any(|(hk, hv)| hk == k && hv == v));
        if !matches {
            return None;
        }
        let after = rest.rfind('}').map_or(rest, |i| &rest[i + 1..]);
        after.split_whitespace().next()?.parse().ok()
    })
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn not_after_of(cert_file: &Path) -> f64 {
    let pem = std::fs::read_to_string(cert_file).expect("certificate file");
    unix(
        CertificateInfo::parse_pem(&pem)
            .expect("certificate")
            .not_after,
    )
}

/// The process metrics every client library exports, read from the real process.
fn check_process_metrics(text: &str, started_after: f64) {
    let value = |name: &str| sample(text, name, &[]).unwrap_or_else(|| panic!("{name}:\n{text}"));
    assert!(
        value("process_resident_memory_bytes") > 1_000_000.0,
        "{text}"
    );
    assert!(value("process_cpu_seconds_total") >= 0.0);
    let (open, max) = (value("process_open_fds"), value("process_max_fds"));
    assert!(open >= 3.0 && open <= max, "open {open}, max {max}");
    let start = value("process_start_time_seconds");
    let now = unix(SystemTime::now());
    // Boot time is whole seconds, the start clock ticks 1/100 s: at most a second early.
    assert!(
        start >= started_after - 1.5 && start <= now,
        "start {start}, launched after {started_after}, now {now}"
    );
}

/// The webhook's own metrics: which binary and version, its process, the certificate it
/// serves, and its kube client's requests (runtime lookups at TrainJob admission).
#[tokio::test]
async fn the_webhook_exports_build_process_certificate_and_kube_request_metrics() {
    let s = Scene::new("metrics-webhook").await;
    let ns = &s.ns;
    let (cert, key) = serving_cert(s.cp, "metrics-webhook");
    let launched = unix(SystemTime::now());
    let mut hook = WebhookReplica::start(s.cp, "metrics", &cert, &key, &[]);
    hook.wait_ready().await;
    let text = hook.metrics().await;

    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        sample(
            &text,
            "holdfast_build_info",
            &[("component", "webhook"), ("version", version)]
        ),
        Some(1.0),
        "{text}"
    );
    check_process_metrics(&text, launched);
    assert_eq!(
        sample(
            &text,
            "holdfast_certificate_expiration_timestamp_seconds",
            &[("kind", "serving"), ("source", "webhook")]
        ),
        Some(not_after_of(&cert)),
        "{text}"
    );

    // A TrainJob admitted in a watched namespace costs a runtime read: one that names a
    // runtime that does not exist is answered 404, one that exists 200.
    register_webhook(s.cp, ns, hook.port, 5).await;
    let admin = s.admin.clone();
    hold_support::ensure_runtime(&admin).await;
    let count = |text: &str, verb: &str, code: &str| {
        sample(
            text,
            "holdfast_kube_requests_total",
            &[("verb", verb), ("code", code)],
        )
        .unwrap_or(0.0)
    };
    let before = hook.metrics().await;
    let jobs = holdfast_cluster::resources::trainjob();
    create_dynamic(
        &admin,
        &jobs,
        Some(ns),
        trainjob("names-missing", "no-such-runtime"),
    )
    .await;
    create_dynamic(
        &admin,
        &jobs,
        Some(ns),
        trainjob("names-existing", hold_support::RUNTIME),
    )
    .await;
    let after = hook.metrics().await;
    assert!(
        count(&after, "get", "404") > count(&before, "get", "404"),
        "{after}"
    );
    assert!(
        count(&after, "get", "200") > count(&before, "get", "200"),
        "{after}"
    );
}

/// The real controller: build info and process; the start-up migration (a job whose runtime
/// is missing keeps it pending; once the runtime exists the gauge reaches 0, the log says
/// the migration is complete and an Event says so on the Lease); hold calls by outcome and
/// cause; the held gauges (from the TrainJob store); kube requests by verb and code; the
/// hold API's certificate.
#[tokio::test]
async fn the_controller_exports_migration_holds_kube_requests_and_certificate_metrics() {
    let s = Scene::new("metrics-controller").await;
    let ns = &s.ns;
    let admin = s.admin.clone();
    hold_support::ensure_runtime(&admin).await;
    let late = format!("late-runtime-{}", rand::random::<u32>());
    let jobs = holdfast_cluster::resources::trainjob();
    create_dynamic(
        &admin,
        &jobs,
        Some(ns),
        trainjob("ready", hold_support::RUNTIME),
    )
    .await;
    create_dynamic(&admin, &jobs, Some(ns), trainjob("waiting", &late)).await;

    let (cert, key) = serving_cert(s.cp, "metrics-controller");
    let (admin_port, api_port) = (free_port().expect("port"), free_port().expect("port"));
    let launched = unix(SystemTime::now());
    let mut proc: Supervised = start_plain_controller_on(
        s.cp,
        ns,
        "metrics",
        admin_port,
        api_port,
        &[
            &format!("--tls-cert={}", cert.display()),
            &format!("--tls-key={}", key.display()),
        ],
    );
    wait_readyz(&mut proc, admin_port, true, MINUTE).await;
    let text = scrape(admin_port).await;
    assert_eq!(
        sample(
            &text,
            "holdfast_build_info",
            &[
                ("component", "controller"),
                ("version", env!("CARGO_PKG_VERSION"))
            ]
        ),
        Some(1.0),
        "{text}"
    );
    check_process_metrics(&text, launched);
    assert_eq!(
        sample(
            &text,
            "holdfast_certificate_expiration_timestamp_seconds",
            &[("kind", "serving"), ("source", "hold_api")]
        ),
        Some(not_after_of(&cert)),
        "{text}"
    );

    // Migration: "ready" is migrated, "waiting" cannot be (its runtime is missing).
    let pending = |text: &str| sample(text, "holdfast_snapshot_migration_pending_trainjobs", &[]);
    wait_for("one job pending migration", MINUTE, || async {
        (pending(&scrape(admin_port).await) == Some(1.0)).then_some(())
    })
    .await;
    let lease: Lease = Api::namespaced(admin.clone(), ns)
        .get("holdfast-controller")
        .await
        .expect("the controller's Lease");
    let events: Api<Event> = Api::namespaced(admin.clone(), ns);
    let completions = || async {
        events
            .list(&ListParams::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("MigrationComplete"))
            .collect::<Vec<_>>()
    };
    assert!(
        completions().await.is_empty(),
        "complete with a job pending"
    );
    assert!(!proc.log_tail(400).contains("start-up migration complete"));

    create_dynamic(
        &admin,
        &holdfast_cluster::resources::cluster_training_runtime(),
        None,
        holdfast_tests::objects::cluster_training_runtime(&late, "pytorch/pytorch:2.10.0"),
    )
    .await;
    wait_for("migration pending 0", MINUTE, || async {
        (pending(&scrape(admin_port).await) == Some(0.0)).then_some(())
    })
    .await;
    let event = wait_for("the MigrationComplete Event", MINUTE, || async {
        completions().await.into_iter().next()
    })
    .await;
    let regarding = event.regarding.expect("regarding");
    assert_eq!(regarding.kind.as_deref(), Some("Lease"));
    assert_eq!(regarding.uid, lease.metadata.uid);
    assert_eq!(event.type_.as_deref(), Some("Normal"));
    let note = event.note.unwrap_or_default();
    assert!(note.contains("2 unfinished TrainJob(s)"), "{note}");
    let log = proc.log_tail(400);
    assert!(
        log.lines()
            .any(|l| l.contains("start-up migration complete") && l.contains("migrated")),
        "{log}"
    );

    // Hold calls through the real hold API.
    grant_alice(s.cp, ns, &["hold", "release"], &["create"]).await;
    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(s.cp.ca_pem().as_bytes()).expect("CA"))
        .build()
        .expect("http client");
    let alice = s.cp.token(Identity::User);
    let call = |job: &'static str, verb: &'static str, instance: u64| {
        let http = http.clone();
        let url = format!("https://127.0.0.1:{api_port}/v1/namespaces/{ns}/trainjobs/{job}/{verb}");
        async move {
            let deadline =
                (jiff::Timestamp::now() + jiff::SignedDuration::from_mins(1)).to_string();
            let r = http
                .post(url)
                .bearer_auth(alice)
                .json(&json!({"instance": instance, "deadline": deadline, "reason": "metrics"}))
                .send()
                .await
                .expect("hold API");
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let calls = |text: &str, call: &str, outcome: &str, cause: &str| {
        sample(
            text,
            "holdfast_hold_calls_total",
            &[("call", call), ("outcome", outcome), ("cause", cause)],
        )
        .unwrap_or(0.0)
    };
    let requests = |text: &str, verb: &str, code: &str| {
        sample(
            text,
            "holdfast_kube_requests_total",
            &[("verb", verb), ("code", code)],
        )
        .unwrap_or(0.0)
    };
    let before = scrape(admin_port).await;
    let (status, answer) = call("ready", "hold", 5).await;
    assert_eq!(status, 200, "{answer}");
    let held = s.read("ready").await;
    let placed = hold_support::annotation(&held, ANN_HOLD_PLACED_AT)
        .expect("hold-placed-at")
        .parse::<jiff::Timestamp>()
        .expect("a timestamp");
    let text = wait_for("the hold counted in the held gauges", MINUTE, || async {
        let text = scrape(admin_port).await;
        (sample(&text, "holdfast_held_objects", &[("kind", "TrainJob")]) == Some(1.0))
            .then_some(text)
    })
    .await;
    assert_eq!(calls(&text, "hold", "ok", "held"), 1.0, "{text}");
    assert_eq!(
        sample(
            &text,
            "holdfast_hold_oldest_placed_timestamp_seconds",
            &[("kind", "TrainJob")]
        ),
        Some(placed.as_millisecond() as f64 / 1000.0),
        "{text}"
    );
    assert!(
        requests(&text, "update", "200") + requests(&text, "patch", "200")
            > requests(&before, "update", "200") + requests(&before, "patch", "200"),
        "the hold's write: {text}"
    );
    assert!(requests(&text, "list", "200") >= 1.0, "{text}");
    assert!(requests(&text, "watch", "200") >= 1.0, "{text}");
    assert!(requests(&text, "create", "201") >= 1.0, "{text}");

    // A stale release is rejected, and a call on a TrainJob that does not exist is answered
    // from a 404.
    let (status, _) = call("ready", "release", 4).await;
    assert_eq!(status, 409);
    let (status, _) = call("ghost", "hold", 1).await;
    assert_eq!(status, 404);
    let (status, answer) = call("ready", "release", 5).await;
    assert_eq!(status, 200, "{answer}");
    let released = if answer["resumed"] == true {
        "resumed"
    } else {
        "released"
    };
    let text = wait_for("the release seen by the held gauges", MINUTE, || async {
        let text = scrape(admin_port).await;
        (sample(&text, "holdfast_held_objects", &[("kind", "TrainJob")]) == Some(0.0))
            .then_some(text)
    })
    .await;
    assert_eq!(
        calls(&text, "release", "rejected", "stale_hold"),
        1.0,
        "{text}"
    );
    assert_eq!(calls(&text, "hold", "rejected", "not_found"), 1.0, "{text}");
    assert_eq!(calls(&text, "release", "ok", released), 1.0, "{text}");
    assert!(
        requests(&text, "get", "404") > requests(&before, "get", "404"),
        "{text}"
    );
    assert_eq!(
        sample(&text, "holdfast_hold_oldest_placed_timestamp_seconds", &[]),
        None,
        "nothing held, no oldest hold: {text}"
    );
}

/// Self-managed certificates: after a reconcile the CA and the serving certificate in their
/// Secrets are exported with their notAfter.
#[tokio::test]
async fn self_managed_certificates_export_their_expiry() {
    let s = Scene::new("metrics-certs").await;
    let ns = &s.ns;
    let admin = s.admin.clone();
    let config = CertConfig {
        namespace: ns.clone(),
        ca_secret: "metrics-ca".into(),
        ca_common_name: "holdfast-metrics-test".into(),
        serving: vec![ServingSecret {
            name: "metrics-webhook-tls".into(),
            dns_names: vec!["metrics-webhook.svc".into()],
        }],
        mutating_webhooks: vec![],
        validating_webhooks: vec![],
        policy: holdfast_certs::RotationPolicy::default(),
        check_interval: MINUTE,
        hold_api_ca: None,
    };
    let expiry = CertificateExpiry::default();
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(certs::run(
        admin.clone(),
        config,
        expiry.clone(),
        None,
        stop.clone(),
    ));
    let (ca, serving) = wait_for("both certificates exported", MINUTE, || async {
        Some((
            expiry.get("ca", "secret/metrics-ca")?,
            expiry.get("serving", "secret/metrics-webhook-tls")?,
        ))
    })
    .await;
    stop.cancel();
    let _ = task.await;
    let secrets: Api<Secret> = Api::namespaced(admin, ns);
    let not_after = |s: Secret, key: &str| {
        let data = s.data.expect("data");
        let pem = String::from_utf8(data[key].0.clone()).expect("PEM");
        unix(
            CertificateInfo::parse_pem(&pem)
                .expect("certificate")
                .not_after,
        )
    };
    assert_eq!(
        ca,
        not_after(
            secrets.get("metrics-ca").await.expect("CA Secret"),
            "ca.crt"
        )
    );
    assert_eq!(
        serving,
        not_after(
            secrets
                .get("metrics-webhook-tls")
                .await
                .expect("serving Secret"),
            "tls.crt"
        )
    );
}

/// GitHub's anchor of a markdown heading.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn runbook_anchors() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src/operating/runbooks.md"),
    )
    .expect("docs/src/operating/runbooks.md");
    doc.lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(anchor)
        .collect()
}

/// The chart's default render where the cluster serves the Prometheus Operator's CRDs.
fn render_with_operator() -> Vec<Value> {
    let helm = helm::ensure().expect("helm");
    let out = helm
        .run(&[
            "template".into(),
            "hf".into(),
            helm::chart_dir().display().to_string(),
            "--namespace".into(),
            "holdfast-system".into(),
            "--api-versions".into(),
            "monitoring.coreos.com/v1/PrometheusRule".into(),
            "--api-versions".into(),
            "monitoring.coreos.com/v1/ServiceMonitor".into(),
        ])
        .expect("helm template");
    helm::documents(&out).expect("documents")
}

fn dashboard_exprs(docs: &[Value]) -> Vec<String> {
    let cm = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "hf-holdfast-dashboard")
        .expect("the dashboard ConfigMap");
    let json = cm["data"]["holdfast.json"].as_str().expect("holdfast.json");
    let dashboard: Value = serde_json::from_str(json).expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    let mut panels: Vec<&Value> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .collect();
    while let Some(p) = panels.pop() {
        if let Some(inner) = p["panels"].as_array() {
            panels.extend(inner);
        }
        for t in p["targets"].as_array().into_iter().flatten() {
            exprs.push(t["expr"].as_str().expect("a target's expr").to_owned());
        }
    }
    for v in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        if let Some(q) = v["definition"].as_str() {
            // label_values(METRIC, label): the metric.
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|r| r.split(',').next())
                .expect("a label_values query");
            exprs.push(inner.to_owned());
        }
    }
    exprs
}

fn rules(docs: &[Value]) -> Vec<Value> {
    let rule = docs
        .iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .expect("the PrometheusRule");
    rule["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").clone())
        .collect()
}

/// Every metric the dashboard selects, and every series the alerts' promtool tests feed them
/// (`alerts::`: each alert fires on those series and on no others), is one the real
/// controller and webhook expose, and every alert links to a section of
/// docs/src/operating/runbooks.md (and every section is an alert's).
#[tokio::test]
async fn dashboard_and_alerts_select_only_exposed_metrics_and_link_existing_runbooks() {
    let s = Scene::new("metrics-names").await;
    let ns = &s.ns;
    let (cert, key) = serving_cert(s.cp, "metrics-names");
    let mut hook = WebhookReplica::start(s.cp, "names", &cert, &key, &[]);
    let admin_port = free_port().expect("port");
    let mut controller = start_plain_controller(s.cp, ns, "names", admin_port, &[]);
    hook.wait_ready().await;
    wait_readyz(&mut controller, admin_port, true, MINUTE).await;
    let mut exposed = exposed_names(&hook.metrics().await);
    exposed.extend(exposed_names(&scrape(admin_port).await));

    let docs = render_with_operator();
    let rules = rules(&docs);
    assert!(rules.len() >= 7, "{rules:?}");
    for name in crate::alerts::series_names() {
        assert!(
            exposed.contains(&name),
            "{name} (a series the alerts are tested on) is not exposed by the binaries"
        );
    }
    for expr in &dashboard_exprs(&docs) {
        let names = selected_names(expr);
        assert!(!names.is_empty(), "no metric in {expr}");
        for name in names {
            assert!(
                exposed.contains(&name),
                "{name} (in {expr}) is not exposed by the binaries"
            );
        }
    }

    let anchors = runbook_anchors();
    let base = "https://github.com/holdfast-dev/holdfast/blob/main/docs/src/operating/runbooks.md#";
    let mut linked = BTreeSet::new();
    for r in &rules {
        let alert = r["alert"].as_str().expect("alert name");
        let url = r["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_else(|| panic!("{alert} has no runbook_url"));
        let fragment = url
            .strip_prefix(base)
            .unwrap_or_else(|| panic!("{alert}: {url}"));
        assert!(
            anchors.contains(fragment),
            "{alert}: no section #{fragment}"
        );
        assert!(
            r["labels"]["severity"].is_string(),
            "{alert} has no severity"
        );
        linked.insert(fragment.to_owned());
    }
    let runbook_sections: BTreeSet<String> = anchors
        .into_iter()
        .filter(|a| a.starts_with("holdfast"))
        .collect();
    assert_eq!(linked, runbook_sections, "a runbook section per alert");
}

/// Where the cluster serves the Prometheus Operator's CRDs, `helm install` renders the
/// PrometheusRule and the ServiceMonitor by default; where it does not, neither (the install
/// would be refused), and `true`/`false` force them. The dashboard ConfigMap is rendered
/// either way, with the sidecar's label.
#[tokio::test]
async fn monitoring_objects_render_by_default_where_the_cluster_serves_their_crds() {
    let helm = helm::ensure().expect("helm");
    let kinds = |docs: &[Value]| -> BTreeSet<String> {
        docs.iter()
            .filter_map(|d| d["kind"].as_str().map(str::to_owned))
            .collect()
    };
    let render = |install: Install| helm.render(&install).expect("helm template");
    let plain = render(Install::new("hf", "holdfast-system"));
    let k = kinds(&plain);
    assert!(
        !k.contains("PrometheusRule") && !k.contains("ServiceMonitor"),
        "{k:?}"
    );
    let dashboard = plain
        .iter()
        .find(|d| d["metadata"]["name"] == "hf-holdfast-dashboard")
        .expect("the dashboard without the Operator");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let k = kinds(&render_with_operator());
    assert!(
        k.contains("PrometheusRule") && k.contains("ServiceMonitor"),
        "{k:?}"
    );
    let forced = render(
        Install::new("hf", "holdfast-system")
            .set("metrics.prometheusRule.enabled=true")
            .set("metrics.serviceMonitor.enabled=true")
            .set("metrics.dashboard.labels.grafana_dashboard=yes")
            .set("metrics.dashboard.namespace=monitoring"),
    );
    let k = kinds(&forced);
    assert!(
        k.contains("PrometheusRule") && k.contains("ServiceMonitor"),
        "{k:?}"
    );
    let dashboard = forced
        .iter()
        .find(|d| d["metadata"]["name"] == "hf-holdfast-dashboard")
        .expect("dashboard");
    assert_eq!(dashboard["metadata"]["namespace"], "monitoring");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "yes");
    let off = render(
        Install::new("hf", "holdfast-system")
            .set("metrics.prometheusRule.enabled=false")
            .set("metrics.dashboard.enabled=false"),
    );
    let k = kinds(&off);
    assert!(!k.contains("PrometheusRule"), "{k:?}");
    assert!(
        !off.iter()
            .any(|d| d["metadata"]["name"] == "hf-holdfast-dashboard"),
        "dashboard disabled"
    );
    let wrong = helm.template(
        &Install::new("hf", "holdfast-system").set("metrics.prometheusRule.enabled=sometimes"),
    );
    let e = format!("{:#}", wrong.expect_err("an unknown value is refused"));
    assert!(e.contains("enabled"), "{e}");
    // A threshold is a duration, in seconds in the PromQL.
    let hours = render(
        Install::new("hf", "holdfast-system")
            .set("metrics.prometheusRule.enabled=true")
            .set("metrics.prometheusRule.thresholds.holdAge=1d12h"),
    );
    let too_old = rules(&hours)
        .into_iter()
        .find(|r| r["alert"] == "HoldfastHoldTooOld")
        .expect("HoldfastHoldTooOld");
    assert!(
        too_old["expr"]
            .as_str()
            .is_some_and(|e| e.trim_end().ends_with("> 129600")),
        "{too_old}"
    );

    // And against a real apiserver serving the CRDs: helm asks the cluster what it serves.
    let cp = ControlPlane::shared();
    cp.install_crds(OPERATOR_CRDS)
        .await
        .expect("the Operator's CRDs");
    let ns = cp.namespace("metrics-helm").await.expect("namespace");
    let kubeconfig = cp.kubeconfig(Identity::Admin).display().to_string();
    let k = wait_for("helm to see the PrometheusRule CRD", MINUTE, || {
        let out = helm.run(&[
            "install".into(),
            "hf".into(),
            helm::chart_dir().display().to_string(),
            "--namespace".into(),
            ns.clone(),
            "--kubeconfig".into(),
            kubeconfig.clone(),
            "--dry-run=server".into(),
        ]);
        async move {
            let out = out.expect("helm install --dry-run=server");
            let manifest = out.split_once("MANIFEST:").map_or(out.as_str(), |(_, m)| m);
            let manifest = manifest.split("\nNOTES:").next().unwrap_or_default();
            let k = kinds(&helm::documents(manifest).expect("documents"));
            k.contains("PrometheusRule").then_some(k)
        }
    })
    .await;
    assert!(
        k.contains("ServiceMonitor") && k.contains("ConfigMap"),
        "{k:?}"
    );
}
