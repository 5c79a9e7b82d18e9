//! The bounds on reading a snapshot, in one place, each with the reason for its number.
//!
//! A snapshot ConfigMap is input holdfast did not necessarily write: one planted where the
//! webhook did not see it (before holdfast was installed, in an excluded namespace, with the
//! webhook off) is read like any other. Its `runtime` YAML may be a *billion laughs* (a few
//! hundred bytes of anchors and aliases that expand to millions of nodes), nested thousands
//! of levels deep, or simply large. Every read is bounded so that one such ConfigMap costs
//! at most a few megabytes and milliseconds, and is then refused as invalid
//! (`SnapshotInvalid`); the controller reads at most [`MAX_CONCURRENT_READS`] at a time, off
//! the threads its Lease renewal runs on.
//!
//! Neither holdfast's writer nor Trainer's (`sigs.k8s.io/yaml`, from JSON) ever writes an
//! anchor or an alias, and both copy an object the apiserver stored; so no snapshot either
//! wrote comes near any of these bounds.

/// The most a ConfigMap's data may hold: the apiserver sums the lengths of the values of
/// `data` and `binaryData` and refuses more than 1 MiB (`core.MaxSecretSize`).
pub const MAX_CONFIGMAP_DATA_BYTES: usize = 1024 * 1024;

/// The most bytes of `data.runtime` read. The apiserver refuses a ConfigMap whose data
/// exceeds 1 MiB, so a longer value cannot come from the apiserver at all; it is refused
/// before any parsing.
pub const MAX_YAML_BYTES: usize = MAX_CONFIGMAP_DATA_BYTES;

/// The deepest nesting of mappings and sequences, in a snapshot read and in a runtime
/// snapshotted (a runtime deeper than this is not snapshotted: its snapshot could not be
/// read back). Decoding recurses once per level, and a snapshot is decoded on a thread with
/// the default 2 MiB stack; 64 is the YAML parser's own default, and three times as deep as
/// Trainer's runtimes nest (about 20 levels: a container's affinity terms under a JobSet's
/// pod template under the runtime's template).
pub const MAX_DEPTH: usize = 64;

/// The most nodes (scalars, mappings, sequences) in one snapshot, aliases expanded. The
/// shortest YAML node takes two bytes (`1,` in a flow sequence), so 1 MiB of YAML without
/// aliases holds at most 524,288 nodes: every snapshot the apiserver can store fits. Decoded,
/// that many nodes are some tens of MiB at worst; [`MAX_CONCURRENT_READS`] bounds how many
/// such values exist at once.
pub const MAX_NODES: usize = MAX_YAML_BYTES / 2;

/// The most parser events (node starts and ends, aliases, document markers): every node is
/// at most two events, so twice [`MAX_NODES`].
pub const MAX_EVENTS: usize = 2 * MAX_NODES;

/// The most alias references (`*name`). Writers never emit one; a hand-written snapshot
/// might use a few. 1,024 allows any hand edit and keeps the alias-to-anchor ratio check
/// (ten aliases per anchor, past 100 aliases) meaningful.
pub const MAX_ALIASES: usize = 1024;

/// The most events replayed by expanding aliases, over the whole document: the alias bomb's
/// amplification. 65,536 replayed events (about 32,768 nodes, a few MiB decoded) is more
/// than a whole typical runtime, so any hand-written snapshot that shares a block by alias
/// fits; a bomb stops after a few milliseconds, instead of at the parser's default of a
/// million events (tens of MiB per ConfigMap, which eight at once made the controller lose
/// its Lease).
pub const MAX_REPLAYED_EVENTS: usize = 65_536;

/// How deep aliases may nest inside replayed aliases (an alias in an anchored block that is
/// itself replayed). A bomb needs one level per factor of its amplification; 8 leaves any
/// hand-written sharing room and cuts the exponent.
pub const MAX_REPLAY_DEPTH: usize = 8;

/// How many snapshots the controller parses at once, each on a blocking thread (never on the
/// async worker threads that renew the Lease and answer `/readyz`). The chart gives the
/// controller one or two CPUs; two parses use them fully, and bound the memory held by
/// decoded snapshots to twice the worst one.
pub const MAX_CONCURRENT_READS: usize = 2;

/// Why a YAML text is refused before parsing, if it is: longer than [`MAX_YAML_BYTES`].
pub fn check_size(yaml: &str) -> Result<(), String> {
    if yaml.len() > MAX_YAML_BYTES {
        return Err(format!(
            "the runtime YAML is {} bytes; at most {MAX_YAML_BYTES} are read",
            yaml.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::read::parse_yaml;
    use std::time::{Duration, Instant};

    /// A billion laughs: `levels` anchors, each a sequence of `fan` aliases of the one
    /// before; fully expanded it holds `fan^levels` scalars.
    fn alias_bomb(levels: usize, fan: usize) -> String {
        let mut yaml = String::from("a0: &a0 [\"lol\"]\n");
        for level in 1..=levels {
            let refs = vec![format!("*a{}", level - 1); fan].join(", ");
            yaml.push_str(&format!("a{level}: &a{level} [{refs}]\n"));
        }
        yaml
    }

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn an_alias_bomb_is_refused_within_milliseconds() {
        // 9 levels of 9: 387,420,489 scalars expanded, under 100 aliases so the ratio check
        // alone does not catch it.
        let started = Instant::now();
        let error = parse_yaml(&alias_bomb(9, 9)).expect_err("the bomb is refused");
        assert!(error.contains("alias"), "{error}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_snapshot_sharing_a_block_by_alias_is_read() {
        let yaml = "apiVersion: trainer.kubeflow.org/v1alpha1\n\
                    kind: ClusterTrainingRuntime\n\
                    metadata: {name: torch}\n\
                    spec:\n  a: &env [{name: A, value: \"1\"}, {name: B, value: \"2\"}]\n  b: *env\n  c: *env\n";
        let value = parse_yaml(yaml).expect("read");
        assert_eq!(value["spec"]["c"][1]["value"], "2");
    }

    #[test]
    fn nesting_deeper_than_the_bound_is_refused() {
        let error = parse_yaml(&nested(300)).expect_err("too deep");
        assert!(
            error.contains("depth") || error.contains("recursion"),
            "{error}"
        );
        parse_yaml(&nested(MAX_DEPTH - 1)).expect("within the bound");
    }

    #[test]
    fn yaml_longer_than_a_configmap_can_hold_is_refused_before_parsing() {
        let yaml = format!("a: \"{}\"\n", "x".repeat(MAX_YAML_BYTES));
        let error = parse_yaml(&yaml).expect_err("too long");
        assert!(error.contains("bytes"), "{error}");
    }

    #[test]
    fn the_densest_yaml_a_configmap_can_hold_is_within_the_node_bound() {
        // Flow sequences of one-digit numbers: two bytes per node, the densest YAML.
        let row = format!("[{}]", vec!["1"; 1000].join(","));
        let rows = (MAX_YAML_BYTES - 64) / (row.len() + 3);
        let yaml = format!("- {}\n", vec![row; rows].join("\n- "));
        assert!(yaml.len() <= MAX_YAML_BYTES);
        parse_yaml(&yaml).expect("every storable snapshot is read");
    }

    #[test]
    fn a_runtime_nested_deeper_than_a_snapshot_may_be_read_is_not_rendered() {
        let mut deep = serde_json::json!(1);
        for _ in 0..300 {
            deep = serde_json::json!({ "x": deep });
        }
        let runtime = |spec: serde_json::Value| {
            serde_json::json!({
                "apiVersion": "hpc.example.com/v1beta1",
                "kind": "SlurmRuntime",
                "metadata": {"name": "deep", "uid": "u", "resourceVersion": "1"},
                "spec": spec,
            })
        };
        let error = crate::snapshot::render(&runtime(deep)).expect_err("too deep");
        assert_eq!(
            error,
            crate::snapshot::SnapshotError::TooDeep { limit: MAX_DEPTH }
        );
        assert_eq!(error.metric_label(), "too_deep");
        // At the bound it is rendered, and read back.
        let mut at_bound = serde_json::json!(1);
        for _ in 0..MAX_DEPTH - 2 {
            at_bound = serde_json::json!({ "x": at_bound });
        }
        let rendered = crate::snapshot::render(&runtime(at_bound)).expect("rendered");
        parse_yaml(&rendered.yaml).expect("read back");
    }
}
