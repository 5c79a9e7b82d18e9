//! The chart's alerts under `promtool test rules` (Prometheus's own rule engine, built from its
//! Go module by `tests/tools/promtool/build.sh`): the PrometheusRule rendered with the default
//! values, and synthetic series (`alerts/holdfast.test.yaml`) under which each alert fires
//! when it should and stays quiet when it should not.

use holdfast_tests::helm;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const TESTS: &str = include_str!("holdfast.test.yaml");

/// promtool, built (or found cached) by its script; `HOLDFAST_PROMTOOL` overrides it.
fn promtool() -> PathBuf {
    if let Some(bin) = std::env::var_os("HOLDFAST_PROMTOOL") {
        return bin.into();
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/promtool/build.sh");
    holdfast_tests::binaries::run_build_script(&script).expect("tests/tools/promtool/build.sh")
}

/// The PrometheusRule's groups as the chart renders them by default (in holdfast-system,
/// where the cluster serves the CRD).
pub fn rendered_groups() -> Value {
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
        ])
        .expect("helm template");
    let docs = helm::documents(&out).expect("documents");
    let rule = docs
        .iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .expect("the PrometheusRule");
    rule["spec"]["groups"].clone()
}

/// The unit tests, parsed.
fn tests() -> Value {
    serde_saphyr::from_str(TESTS).expect("alerts/holdfast.test.yaml is YAML")
}

/// The metric names the alerts' tests feed promtool (the metrics suite checks that the
/// binaries expose each).
pub fn series_names() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for test in tests()["tests"].as_array().expect("tests") {
        for s in test["input_series"].as_array().expect("input_series") {
            let series = s["series"].as_str().expect("series");
            let end = series.find('{').unwrap_or(series.len());
            names.insert(series[..end].to_owned());
        }
    }
    names
}

fn promtool_run(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(promtool())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("running promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

/// Every alert of the PrometheusRule fires under series that should fire it, at the time it
/// should (not before its `for`), with its labels, and stays quiet under series that should
/// not (a flat counter, another namespace's series, a condition that ends before its `for`).
/// promtool also checks the rules themselves, annotations' templates included.
#[test]
fn every_alert_fires_when_it_should_and_stays_quiet_when_it_should_not() {
    let groups = rendered_groups();
    let alerts: BTreeSet<String> = groups
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").iter())
        .map(|r| r["alert"].as_str().expect("alert").to_owned())
        .collect();
    assert_eq!(alerts.len(), 8, "{alerts:?}");

    // Each alert has a case where it fires and one where it stays quiet.
    let (mut fired, mut quiet) = (BTreeSet::new(), BTreeSet::new());
    for test in tests()["tests"].as_array().expect("tests") {
        for case in test["alert_rule_test"].as_array().expect("alert_rule_test") {
            let name = case["alertname"].as_str().expect("alertname").to_owned();
            let expected = case["exp_alerts"].as_array().map_or(0, Vec::len);
            if expected > 0 {
                fired.insert(name);
            } else {
                quiet.insert(name);
            }
        }
    }
    assert_eq!(fired, alerts, "an alert never seen firing");
    assert_eq!(quiet, alerts, "an alert never seen quiet");

    let dir = tempfile::tempdir().expect("tempdir");
    let full = serde_json::json!({ "groups": groups });
    std::fs::write(dir.path().join("full.yaml"), full.to_string()).expect("write");
    let checked = promtool_run(dir.path(), &["check", "rules", "full.yaml"]);
    assert!(checked.contains("SUCCESS: 8 rules found"), "{checked}");
    // The tests compare labels only: the annotations (whose text the runbooks test reads) are
    // left out, or every expected alert would have to repeat them.
    let mut bare = groups.clone();
    for g in bare.as_array_mut().expect("groups") {
        for r in g["rules"].as_array_mut().expect("rules") {
            r.as_object_mut().expect("rule").remove("annotations");
        }
    }
    std::fs::write(
        dir.path().join("rules.yaml"),
        serde_json::json!({ "groups": bare }).to_string(),
    )
    .expect("write");
    std::fs::write(dir.path().join("holdfast.test.yaml"), TESTS).expect("write");
    let tested = promtool_run(dir.path(), &["test", "rules", "holdfast.test.yaml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}
