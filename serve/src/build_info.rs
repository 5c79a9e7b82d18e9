//! `holdfast_build_info{component, version} 1`: which binary, of which release, answers a
//! scrape (join it to any other series by instance to label it with its version).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    component: &'static str,
    version: &'static str,
}

/// Registers `holdfast_build_info` for `component` (`controller` or `webhook`).
pub fn register_build_info(registry: &mut Registry, component: &'static str) {
    registry.register(
        "holdfast_build",
        "Which holdfast binary and release this is",
        Info::new(BuildLabels {
            component,
            version: env!("CARGO_PKG_VERSION"),
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_info_names_the_component_and_version() {
        let mut registry = Registry::default();
        register_build_info(&mut registry, "webhook");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        let want = format!(
            "holdfast_build_info{{component=\"webhook\",version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        assert!(text.contains(&want), "{text}");
    }
}
