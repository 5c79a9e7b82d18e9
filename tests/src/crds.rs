//! Installing the upstream CRDs (and any test CRD) into the control plane.

use anyhow::Context;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use std::path::Path;
use std::time::Duration;

/// Every CRD in the YAML files directly under `dir` (documents separated by `---`).
pub fn read_dir(dir: &Path) -> anyhow::Result<Vec<CustomResourceDefinition>> {
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f)?;
        out.extend(parse(&text).with_context(|| format!("parsing {}", f.display()))?);
    }
    Ok(out)
}

/// CRDs in a multi-document YAML string.
pub fn parse(text: &str) -> anyhow::Result<Vec<CustomResourceDefinition>> {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(text)?;
    docs.into_iter()
        .filter(|d| d.get("kind").and_then(|k| k.as_str()) == Some("CustomResourceDefinition"))
        .map(|d| serde_json::from_value(d).map_err(anyhow::Error::from))
        .collect()
}

/// Create the CRDs (an existing one is left as it is) and wait until each is Established.
pub async fn install(
    client: &kube::Client,
    crds: Vec<CustomResourceDefinition>,
) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for crd in crds {
        let name = crd.metadata.name.clone().context("CRD without a name")?;
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("creating CRD {name}")),
        }
        names.push(name);
    }
    for name in names {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let crd = api.get(&name).await?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "CRD {name} not Established after 60s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}
