//! The snapshot promises, one test each (SPEC.md "Snapshots", KEP-2599).

use super::*;
use crate::names;
use proptest::prelude::*;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const JOB_UID: &str = "0f5e7c2a-9a51-4b8e-8d3c-2b6f1e0a9c11";

/// A ClusterTrainingRuntime as the apiserver returns it: server fields, kubectl's
/// last-applied copy, Trainer's finalizer.
fn served_cluster_runtime() -> Value {
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {
            "name": "torch-distributed",
            "uid": "7d3c1f9e-5a0b-4c8e-9f21-0b6a1d2e3f40",
            "resourceVersion": "48213",
            "generation": 3,
            "creationTimestamp": "2026-08-30T09:12:44Z",
            "finalizers": ["trainer.kubeflow.org/resource-in-use"],
            "labels": { "trainer.kubeflow.org/framework": "torch" },
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{\"kind\":\"ClusterTrainingRuntime\"}\n",
                "example.com/owner-team": "ml-platform"
            },
            "managedFields": [{
                "manager": "kubectl-client-side-apply",
                "operation": "Update",
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "time": "2026-08-30T09:12:44Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": { "f:spec": { ".": {}, "f:mlPolicy": {} } }
            }]
        },
        "spec": {
            "mlPolicy": { "numNodes": 1, "torch": { "numProcPerNode": "auto" } },
            "template": { "spec": { "replicatedJobs": [{
                "name": "node",
                "replicas": 1,
                "template": {
                    "metadata": { "labels": { "trainer.kubeflow.org/trainjob-ancestor-step": "trainer" } },
                    "spec": { "template": { "spec": { "containers": [{
                        "name": "node",
                        "image": "pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime",
                        "command": ["torchrun", "train.py"],
                        "args": ["--enable", "on"]
                    }]}}}
                }
            }]}}
        }
    })
}

fn trainjob_for(runtime_ref: Value) -> Value {
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": { "name": "mnist", "namespace": "team-a", "uid": JOB_UID },
        "spec": { "runtimeRef": runtime_ref }
    })
}

/// A TrainJob referencing `torch-distributed` with the CRD defaults applied by the apiserver.
fn trainjob() -> Value {
    trainjob_for(json!({
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
        "name": "torch-distributed"
    }))
}

fn holdfast_snapshot_of(runtime: &Value, job: &Value) -> Value {
    let rendered = render(runtime).expect("render");
    snapshot_configmap(job, &rendered).expect("configmap")
}

fn yaml_of(configmap: &Value) -> &str {
    configmap["data"]["runtime"].as_str().expect("data.runtime")
}

/// A ConfigMap the way Trainer 2.3's `createRuntimeSnapshot` writes it: no labels or
/// annotations, one controller ownerReference, and the whole typed object through
/// `sigs.k8s.io/yaml` (this text is that function's output for the runtime above as Trainer's
/// typed client holds it: server fields kept, `{}` for empty structs, Go's key order).
fn trainer_written_configmap(owner_uid: &str) -> Value {
    let runtime_yaml = r#"apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  annotations:
    example.com/owner-team: ml-platform
    kubectl.kubernetes.io/last-applied-configuration: |
      {"kind":"ClusterTrainingRuntime"}
  creationTimestamp: "2026-08-30T09:12:44Z"
  finalizers:
  - trainer.kubeflow.org/resource-in-use
  generation: 3
  labels:
    trainer.kubeflow.org/framework: torch
  managedFields:
  - apiVersion: trainer.kubeflow.org/v1alpha1
    fieldsType: FieldsV1
    fieldsV1:
      f:spec:
        .: {}
        f:mlPolicy: {}
    manager: kubectl-client-side-apply
    operation: Update
    time: "2026-08-30T09:12:44Z"
  name: torch-distributed
  resourceVersion: "48213"
  uid: 7d3c1f9e-5a0b-4c8e-9f21-0b6a1d2e3f40
spec:
  mlPolicy:
    numNodes: 1
    torch:
      numProcPerNode: auto
  template:
    metadata: {}
    spec:
      replicatedJobs:
      - name: node
        replicas: 1
        template:
          metadata:
            labels:
              trainer.kubeflow.org/trainjob-ancestor-step: trainer
          spec:
            template:
              metadata: {}
              spec:
                containers:
                - args:
                  - --enable
                  - "on"
                  command:
                  - torchrun
                  - train.py
                  image: pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime
                  name: node
                  resources: {}
"#;
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "mnist-runtime-snapshot",
            "namespace": "team-a",
            "uid": "c1f0a3b2-0000-4000-8000-000000000001",
            "resourceVersion": "48250",
            "ownerReferences": [{
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "name": "mnist",
                "uid": owner_uid,
                "controller": true,
                "blockOwnerDeletion": true
            }],
            "managedFields": [{
                "manager": "trainer",
                "operation": "Apply",
                "apiVersion": "v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": { "f:data": { "f:runtime": {} } }
            }]
        },
        "data": { "runtime": runtime_yaml }
    })
}

#[test]
fn snapshot_has_kep_structure_and_controller_owner_reference() {
    let cm = holdfast_snapshot_of(&served_cluster_runtime(), &trainjob());

    assert_eq!(cm["apiVersion"], "v1");
    assert_eq!(cm["kind"], "ConfigMap");
    assert_eq!(cm["metadata"]["name"], "mnist-runtime-snapshot");
    assert_eq!(cm["metadata"]["namespace"], "team-a");
    assert_eq!(
        cm["metadata"]["ownerReferences"],
        json!([{
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "name": "mnist",
            "uid": JOB_UID,
            "controller": true,
            "blockOwnerDeletion": true
        }])
    );
    assert_eq!(
        cm["metadata"]["labels"],
        json!({ names::LABEL_RUNTIME_SNAPSHOT: "true" })
    );
    assert_eq!(cm["immutable"], true);
    // A single data item, key `runtime`, holding the runtime as YAML.
    let data = cm["data"].as_object().expect("data");
    assert_eq!(data.keys().collect::<Vec<_>>(), vec!["runtime"]);
    let runtime = read::parse_yaml(yaml_of(&cm)).expect("yaml");
    assert_eq!(
        runtime
            .as_object()
            .expect("object")
            .keys()
            .collect::<Vec<_>>(),
        vec!["apiVersion", "kind", "metadata", "spec"]
    );
    assert_eq!(runtime["apiVersion"], "trainer.kubeflow.org/v1alpha1");
    assert_eq!(runtime["kind"], "ClusterTrainingRuntime");
    assert_eq!(runtime["metadata"]["name"], "torch-distributed");
}

#[test]
fn snapshot_yaml_excludes_server_set_fields() {
    let mut runtime = served_cluster_runtime();
    runtime["metadata"]["deletionTimestamp"] = json!("2026-09-01T00:00:00Z");
    runtime["metadata"]["deletionGracePeriodSeconds"] = json!(0);
    runtime["metadata"]["selfLink"] = json!("/apis/trainer.kubeflow.org/v1alpha1/x");
    runtime["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u"}]);
    runtime["metadata"]["generateName"] = json!("torch-");
    runtime["status"] = json!({ "conditions": [{ "type": "Ready", "status": "True" }] });

    let rendered = render(&runtime).expect("render");

    for server_field in [
        "uid:",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
        "ownerReferences",
        "finalizers",
        "generateName",
        "status",
        "48213",
        "7d3c1f9e",
    ] {
        assert!(
            !rendered.yaml.contains(server_field),
            "{server_field} leaked into:\n{}",
            rendered.yaml
        );
    }
    assert_eq!(
        rendered.object["metadata"],
        json!({
            "name": "torch-distributed",
            "labels": { "trainer.kubeflow.org/framework": "torch" },
            "annotations": { "example.com/owner-team": "ml-platform" }
        })
    );
    // They went into the provenance instead.
    assert_eq!(
        rendered.provenance.uid,
        "7d3c1f9e-5a0b-4c8e-9f21-0b6a1d2e3f40"
    );
    assert_eq!(rendered.provenance.resource_version, "48213");
    assert_eq!(rendered.provenance.generation, Some(3));
}

#[test]
fn provenance_annotations_record_what_was_copied() {
    let rendered = render(&served_cluster_runtime()).expect("render");
    let cm = snapshot_configmap(&trainjob(), &rendered).expect("configmap");
    let expected_sha = hex::encode(Sha256::digest(rendered.yaml.as_bytes()));

    assert_eq!(rendered.provenance.sha256, expected_sha);
    assert_eq!(
        cm["metadata"]["annotations"],
        json!({
            names::ANN_RUNTIME_UID: "7d3c1f9e-5a0b-4c8e-9f21-0b6a1d2e3f40",
            names::ANN_RUNTIME_RESOURCE_VERSION: "48213",
            names::ANN_RUNTIME_GENERATION: "3",
            names::ANN_RUNTIME_SHA256: expected_sha,
        })
    );
    // An object without a generation records none.
    let mut no_generation = rendered.provenance.clone();
    no_generation.generation = None;
    assert!(!provenance_annotations(&no_generation).contains_key(names::ANN_RUNTIME_GENERATION));
}

#[test]
fn last_applied_annotation_is_dropped() {
    let rendered = render(&served_cluster_runtime()).expect("render");
    assert!(!rendered.yaml.contains(LAST_APPLIED_ANNOTATION));
    assert_eq!(
        rendered.object["metadata"]["annotations"],
        json!({ "example.com/owner-team": "ml-platform" })
    );

    // When it was the only annotation, no empty `annotations: {}` is left behind.
    let mut only_last_applied = served_cluster_runtime();
    only_last_applied["metadata"]["annotations"] = json!({ LAST_APPLIED_ANNOTATION: "{}" });
    only_last_applied["metadata"]["labels"] = json!({});
    let rendered = render(&only_last_applied).expect("render");
    assert_eq!(
        rendered.object["metadata"],
        json!({ "name": "torch-distributed" })
    );
    assert!(!rendered.yaml.contains("annotations"));
    assert!(
        rendered
            .yaml
            .contains("metadata:\n  name: torch-distributed\nspec:\n")
    );
}

#[test]
fn namespaced_runtime_keeps_namespace() {
    let mut runtime = served_cluster_runtime();
    runtime["kind"] = json!("TrainingRuntime");
    runtime["metadata"]["namespace"] = json!("team-a");
    let job = trainjob_for(json!({ "kind": "TrainingRuntime", "name": "torch-distributed" }));

    let rendered = render(&runtime).expect("render");
    assert_eq!(rendered.object["metadata"]["namespace"], "team-a");
    assert!(rendered.yaml.contains("namespace: team-a"));

    let read = read_snapshot(&holdfast_snapshot_of(&runtime, &job), &job).expect("read");
    assert_eq!(read.runtime["metadata"]["namespace"], "team-a");

    // A cluster-scoped runtime has none: not even an empty one.
    let rendered = render(&served_cluster_runtime()).expect("render");
    assert!(rendered.object["metadata"].get("namespace").is_none());
    assert!(!rendered.yaml.contains("namespace"));
}

#[test]
fn unknown_runtime_kind_is_rendered_verbatim() {
    let slurm = json!({
        "apiVersion": "hpc.example.com/v1beta2",
        "kind": "SlurmRuntime",
        "metadata": {
            "name": "a100-partition",
            "uid": "5a8f0c3e-1111-4222-8333-944455556666",
            "resourceVersion": "77",
            "generation": 1,
            "managedFields": [{ "manager": "helm" }]
        },
        "spec": {
            "partition": "a100",
            "sbatch": { "nodes": 4, "gres": "gpu:a100:8", "exclusive": true, "time": "1:30:00" },
            "prolog": "#!/bin/sh\nmodule load cuda/12.8\n",
            "weights": [0.5, 1.0, 2],
            "unset": null,
            "empty": {}
        },
        "clusterEndpoint": { "host": "slurmctld.hpc", "port": 6817 },
        "status": { "lastProbe": "ok" }
    });
    let job = trainjob_for(json!({
        "apiGroup": "hpc.example.com", "kind": "SlurmRuntime", "name": "a100-partition"
    }));

    let rendered = render(&slurm).expect("render");
    // Everything under spec verbatim, including null and {}; the other top-level
    // configuration kept; status not.
    assert_eq!(rendered.object["spec"], slurm["spec"]);
    assert_eq!(rendered.object["clusterEndpoint"], slurm["clusterEndpoint"]);
    assert!(rendered.object.get("status").is_none());
    // "1:30:00" is a base-60 number to a YAML 1.1 reader: it must stay a string.
    assert!(rendered.yaml.contains("\"1:30:00\""), "{}", rendered.yaml);

    let read = read_snapshot(&holdfast_snapshot_of(&slurm, &job), &job).expect("read");
    assert_eq!(read.runtime, rendered.object);
    assert_eq!(read.runtime["spec"], slurm["spec"]);
}

#[test]
fn rendering_is_deterministic() {
    // The same runtime with its keys in another order, as another apiserver call may give it.
    let text = serde_json::to_string(&served_cluster_runtime()).expect("json");
    let reordered: Value = serde_json::from_str(
        r#"{"spec":{"template":{"spec":{"replicatedJobs":[{"template":{"spec":{"template":{"spec":{"containers":[{"args":["--enable","on"],"command":["torchrun","train.py"],"image":"pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime","name":"node"}]}}},"metadata":{"labels":{"trainer.kubeflow.org/trainjob-ancestor-step":"trainer"}}},"replicas":1,"name":"node"}]}},"mlPolicy":{"torch":{"numProcPerNode":"auto"},"numNodes":1}},"metadata":{"managedFields":[],"uid":"7d3c1f9e-5a0b-4c8e-9f21-0b6a1d2e3f40","resourceVersion":"99999","name":"torch-distributed","labels":{"trainer.kubeflow.org/framework":"torch"},"annotations":{"example.com/owner-team":"ml-platform"}},"kind":"ClusterTrainingRuntime","apiVersion":"trainer.kubeflow.org/v1alpha1"}"#,
    )
    .expect("json");
    let original: Value = serde_json::from_str(&text).expect("json");

    let a = render(&original).expect("render");
    let b = render(&original).expect("render");
    let c = render(&reordered).expect("render");
    assert_eq!(a.yaml, b.yaml);
    assert_eq!(
        a.yaml, c.yaml,
        "key order or server fields changed the bytes"
    );
    assert_eq!(a.provenance.sha256, c.provenance.sha256);
    // Keys are written in byte order.
    let top: Vec<&str> = a
        .yaml
        .lines()
        .filter(|l| !l.starts_with(' ') && !l.starts_with('-'))
        .collect();
    assert_eq!(
        top,
        vec![
            "apiVersion: trainer.kubeflow.org/v1alpha1",
            "kind: ClusterTrainingRuntime",
            "metadata:",
            "spec:"
        ]
    );

    // Any change to what is kept changes the digest.
    let mut edited = original.clone();
    edited["spec"]["mlPolicy"]["numNodes"] = json!(2);
    assert_ne!(
        render(&edited).expect("render").provenance.sha256,
        a.provenance.sha256
    );
}

#[test]
fn snapshot_parsed_back_exactly_as_trainers_reader_does() {
    let runtime = served_cluster_runtime();
    let job = trainjob();
    let cm = holdfast_snapshot_of(&runtime, &job);

    let read = read_snapshot(&cm, &job).expect("holdfast's snapshot must pass the reader");

    // Trainer's checks: controller ownerReference uid, then group/kind/name of the YAML.
    let reference = runtime_ref(&job).expect("runtimeRef");
    let api_version = read.runtime["apiVersion"].as_str().expect("apiVersion");
    assert_eq!(api_group_of(api_version), reference.api_group);
    assert_eq!(read.runtime["kind"], json!(reference.kind));
    assert_eq!(read.runtime["metadata"]["name"], json!(reference.name));
    // The spec, the part Trainer reconciles from, is unchanged, YAML 1.1 traps included
    // ("on" in args stays a string).
    assert_eq!(read.runtime["spec"], runtime["spec"]);
    assert_eq!(
        read.runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
            ["spec"]["containers"][0]["args"][1],
        "on"
    );
    assert_eq!(read.writer, Writer::Holdfast);
    assert_eq!(read.integrity, Integrity::Verified);
    assert_eq!(read.resource_version(), Some("48213"));
    assert_eq!(read.source.generation, Some(3));
}

#[test]
fn trainer_written_snapshot_is_accepted() {
    let job = trainjob();
    let cm = trainer_written_configmap(JOB_UID);

    let read = read_snapshot(&cm, &job).expect("a snapshot Trainer wrote is the snapshot");

    assert_eq!(read.writer, Writer::Trainer);
    assert_eq!(read.integrity, Integrity::Unrecorded);
    // Its provenance comes from the server fields Trainer copied into the YAML.
    assert_eq!(
        read.source,
        Source {
            uid: Some("7d3c1f9e-5a0b-4c8e-9f21-0b6a1d2e3f40".to_owned()),
            resource_version: Some("48213".to_owned()),
            generation: Some(3),
        }
    );
    assert_eq!(
        read.runtime["metadata"]["managedFields"][0]["manager"],
        "kubectl-client-side-apply"
    );
    assert_eq!(read.runtime["spec"]["mlPolicy"]["numNodes"], 1);
    assert_eq!(
        read.runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
            ["spec"]["containers"][0]["args"][1],
        "on"
    );
    // Compared fairly with the live runtime: server fields and the `{}` Go's typed round
    // trip adds are not drift.
    assert_eq!(
        drift(&read.runtime, &served_cluster_runtime()),
        Drift::InSync
    );
    // A runtime edited since is.
    let mut edited = served_cluster_runtime();
    edited["spec"]["mlPolicy"]["numNodes"] = json!(4);
    assert_eq!(
        drift(&read.runtime, &edited),
        Drift::Drifted {
            paths: vec!["/spec/mlPolicy/numNodes".to_owned()]
        }
    );
}

#[test]
fn squatted_configmap_is_not_trusted() {
    let job = trainjob();

    // Controlled by another object.
    let other = trainer_written_configmap("99999999-0000-4000-8000-000000000000");
    assert_eq!(
        read_snapshot(&other, &job),
        Err(SnapshotFault::Squatted {
            owner: Some("99999999-0000-4000-8000-000000000000".to_owned())
        })
    );

    // Owned by the TrainJob, but not as controller.
    let mut not_controller = holdfast_snapshot_of(&served_cluster_runtime(), &job);
    not_controller["metadata"]["ownerReferences"][0]["controller"] = json!(false);
    assert_eq!(
        read_snapshot(&not_controller, &job),
        Err(SnapshotFault::Squatted { owner: None })
    );

    // No ownerReferences at all: someone created it by hand, label and all.
    let mut unowned = holdfast_snapshot_of(&served_cluster_runtime(), &job);
    unowned["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("ownerReferences");
    let fault = read_snapshot(&unowned, &job).expect_err("unowned");
    assert_eq!(fault, SnapshotFault::Squatted { owner: None });
    assert_eq!(fault.metric_label(), "squatted");

    // The controller is the first ownerReference with controller: true, as GetControllerOf.
    let mut two_owners = holdfast_snapshot_of(&served_cluster_runtime(), &job);
    two_owners["metadata"]["ownerReferences"] = json!([
        { "uid": "aaaa", "controller": false },
        { "uid": JOB_UID, "controller": true },
    ]);
    assert!(read_snapshot(&two_owners, &job).is_ok());
}

#[test]
fn mismatched_runtime_ref_is_refused() {
    let runtime = served_cluster_runtime();
    let cm = holdfast_snapshot_of(&runtime, &trainjob());

    let cases = [
        (
            json!({ "apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": "deepspeed" }),
            RefField::Name,
            "deepspeed",
            "torch-distributed",
        ),
        (
            json!({ "apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": "torch-distributed" }),
            RefField::Kind,
            "TrainingRuntime",
            "ClusterTrainingRuntime",
        ),
        (
            json!({ "apiGroup": "hpc.example.com", "kind": "ClusterTrainingRuntime", "name": "torch-distributed" }),
            RefField::ApiGroup,
            "hpc.example.com",
            "trainer.kubeflow.org",
        ),
    ];
    for (reference, field, expected, found) in cases {
        let job = trainjob_for(reference);
        let fault = read_snapshot(&cm, &job).expect_err("must refuse");
        assert_eq!(
            fault,
            SnapshotFault::Mismatch {
                field,
                expected: expected.to_owned(),
                found: found.to_owned()
            }
        );
        assert_eq!(fault.metric_label(), "mismatch");
    }

    // A whole-object copy without apiVersion/kind (kubeflow/trainer#3921) is refused, as
    // Trainer's own reader refuses it.
    let mut no_type_meta = trainer_written_configmap(JOB_UID);
    let yaml = no_type_meta["data"]["runtime"]
        .as_str()
        .expect("yaml")
        .to_owned();
    let stripped: String = yaml
        .lines()
        .filter(|l| !l.starts_with("apiVersion:") && !l.starts_with("kind:"))
        .map(|l| format!("{l}\n"))
        .collect();
    no_type_meta["data"]["runtime"] = json!(stripped);
    assert_eq!(
        read_snapshot(&no_type_meta, &trainjob()),
        Err(SnapshotFault::Mismatch {
            field: RefField::ApiGroup,
            expected: "trainer.kubeflow.org".to_owned(),
            found: String::new()
        })
    );

    // A namespaced runtime from another namespace is not this TrainJob's.
    let mut foreign = served_cluster_runtime();
    foreign["kind"] = json!("TrainingRuntime");
    foreign["metadata"]["namespace"] = json!("team-b");
    let job = trainjob_for(json!({ "kind": "TrainingRuntime", "name": "torch-distributed" }));
    let mut cm = holdfast_snapshot_of(&served_cluster_runtime(), &trainjob());
    cm["data"]["runtime"] = json!(render(&foreign).expect("render").yaml);
    assert_eq!(
        read_snapshot(&cm, &job),
        Err(SnapshotFault::Mismatch {
            field: RefField::Namespace,
            expected: "team-a".to_owned(),
            found: "team-b".to_owned()
        })
    );
}

#[test]
fn snapshot_of_another_runtime_is_never_written() {
    let rendered = render(&served_cluster_runtime()).expect("render");
    let job = trainjob_for(json!({ "name": "deepspeed" }));
    let err = snapshot_configmap(&job, &rendered).expect_err("wrong runtime");
    assert_eq!(
        err,
        SnapshotError::WrongRuntime {
            field: RefField::Name,
            expected: "deepspeed".to_owned(),
            found: "torch-distributed".to_owned()
        }
    );
    assert_eq!(err.metric_label(), "wrong_runtime");
}

#[test]
fn malformed_snapshot_is_refused() {
    let job = trainjob();
    let good = holdfast_snapshot_of(&served_cluster_runtime(), &job);

    let mut no_key = good.clone();
    no_key["data"] = json!({ "wrong-key": "" });
    let mut not_yaml = good.clone();
    not_yaml["data"]["runtime"] = json!("invalid: yaml: content:\n  - broken");
    let mut not_mapping = good.clone();
    not_mapping["data"]["runtime"] = json!("- just\n- a list\n");
    let mut empty = good;
    empty["data"]["runtime"] = json!("");

    for cm in [no_key, not_yaml, not_mapping, empty] {
        let fault = read_snapshot(&cm, &job).expect_err("malformed");
        assert!(
            matches!(fault, SnapshotFault::Malformed { .. }),
            "{fault:?}"
        );
        assert_eq!(fault.metric_label(), "malformed");
    }
}

#[test]
fn altered_snapshot_is_reported() {
    let job = trainjob();
    let mut cm = holdfast_snapshot_of(&served_cluster_runtime(), &job);
    let recorded = cm["metadata"]["annotations"][names::ANN_RUNTIME_SHA256]
        .as_str()
        .expect("sha")
        .to_owned();
    let altered = yaml_of(&cm).replace("numNodes: 1", "numNodes: 64");
    cm["data"]["runtime"] = json!(altered);

    let read = read_snapshot(&cm, &job).expect("still Trainer's runtime");
    assert_eq!(read.runtime["spec"]["mlPolicy"]["numNodes"], 64);
    assert_eq!(
        read.integrity,
        Integrity::Altered {
            recorded,
            actual: hex::encode(Sha256::digest(altered.as_bytes()))
        }
    );
}

#[test]
fn drift_detected_after_runtime_edit() {
    let live = served_cluster_runtime();
    let snapshot = read_snapshot(&holdfast_snapshot_of(&live, &trainjob()), &trainjob())
        .expect("read")
        .runtime;

    let mut image_bumped = live.clone();
    image_bumped["metadata"]["resourceVersion"] = json!("50000");
    image_bumped["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        ["spec"]["containers"][0]["image"] =
        json!("pytorch/pytorch:2.11.0-cuda12.8-cudnn9-runtime");
    assert!(drifted(&snapshot, &image_bumped));
    assert_eq!(
        drift(&snapshot, &image_bumped),
        Drift::Drifted {
            paths: vec![
                "/spec/template/spec/replicatedJobs/0/template/spec/template/spec/containers/0/image"
                    .to_owned()
            ]
        }
    );

    let mut relabelled = live.clone();
    relabelled["metadata"]["labels"]["trainer.kubeflow.org/framework"] = json!("deepspeed");
    assert!(drifted(&snapshot, &relabelled));

    // Swapping one empty policy for another is drift, even against Trainer's whole-object copy.
    let trainer_copy = read_snapshot(&trainer_written_configmap(JOB_UID), &trainjob())
        .expect("read")
        .runtime;
    let mut swapped = live.clone();
    swapped["spec"]["mlPolicy"] = json!({ "numNodes": 1, "mpi": {} });
    let mut snapshot_with_empty_policy = trainer_copy.clone();
    snapshot_with_empty_policy["spec"]["mlPolicy"] = json!({ "numNodes": 1, "torch": {} });
    assert!(drifted(&snapshot_with_empty_policy, &swapped));
    // And against holdfast's own snapshot a vanished field is drift, empty or not.
    let mut dropped_empty = live.clone();
    dropped_empty["spec"]["mlPolicy"] = json!({ "numNodes": 1 });
    let mut holdfast_with_empty = snapshot.clone();
    holdfast_with_empty["spec"]["mlPolicy"] = json!({ "numNodes": 1, "torch": {} });
    assert!(drifted(&holdfast_with_empty, &dropped_empty));
}

#[test]
fn no_drift_for_identical_runtime() {
    let live = served_cluster_runtime();
    let snapshot = read_snapshot(&holdfast_snapshot_of(&live, &trainjob()), &trainjob())
        .expect("read")
        .runtime;
    assert_eq!(drift(&snapshot, &live), Drift::InSync);

    // What changes on every write, or never was configuration, is not drift.
    let mut touched = live.clone();
    touched["metadata"]["resourceVersion"] = json!("60001");
    touched["metadata"]["managedFields"] = json!([{ "manager": "someone-else" }]);
    touched["metadata"]["finalizers"] = json!([]);
    touched["metadata"]["annotations"][LAST_APPLIED_ANNOTATION] = json!("{\"changed\":true}");
    touched["status"] = json!({ "observed": 1 });
    assert!(!drifted(&snapshot, &touched));

    // 1 and 1.0 are the same number.
    let mut float = live;
    float["spec"]["mlPolicy"]["numNodes"] = json!(1.0);
    assert!(!drifted(&snapshot, &float));
}

#[test]
fn admission_race_flagged_for_other_version() {
    assert!(admission_race(Some("48213"), "48290"));
    assert!(!admission_race(Some("48213"), "48213"));
    // Admitted before holdfast recorded anything: nothing to compare, nothing flagged.
    assert!(!admission_race(None, "48290"));

    // Wired end to end: the version on the TrainJob against the version the snapshot copied.
    let mut job = trainjob();
    job["metadata"]["annotations"] =
        json!({ names::ANN_ADMITTED_RUNTIME_RESOURCE_VERSION: "48100" });
    let read =
        read_snapshot(&holdfast_snapshot_of(&served_cluster_runtime(), &job), &job).expect("read");
    let admitted =
        job["metadata"]["annotations"][names::ANN_ADMITTED_RUNTIME_RESOURCE_VERSION].as_str();
    let snapshotted = read.resource_version().expect("recorded");
    assert!(admission_race(admitted, snapshotted));
    // Trainer's snapshots record the version in their YAML, so they are checked too.
    let trainer = read_snapshot(&trainer_written_configmap(JOB_UID), &job).expect("read");
    assert!(admission_race(
        admitted,
        trainer.resource_version().expect("in yaml")
    ));
}

#[test]
fn oversized_runtime_is_refused_before_write() {
    let job = trainjob();
    let with_filler = |n: usize| {
        let mut runtime = served_cluster_runtime();
        runtime["spec"]["filler"] = json!("a".repeat(n));
        render(&runtime).expect("render")
    };
    // Find the filler that makes the YAML exactly the limit.
    let base = with_filler(1000);
    let exact = 1000 + MAX_CONFIGMAP_DATA_BYTES - base.yaml.len();
    let at_limit = with_filler(exact);
    assert_eq!(at_limit.yaml.len(), MAX_CONFIGMAP_DATA_BYTES);
    assert!(snapshot_configmap(&job, &at_limit).is_ok());

    let over = with_filler(exact + 1);
    let err = snapshot_configmap(&job, &over).expect_err("too large");
    assert_eq!(
        err,
        SnapshotError::TooLarge {
            bytes: MAX_CONFIGMAP_DATA_BYTES + 1,
            limit: MAX_CONFIGMAP_DATA_BYTES
        }
    );
    assert_eq!(err.metric_label(), "too_large");
}

/// The example ConfigMap of KEP-2599, verbatim but for its placeholder name.
const KEP_EXAMPLE: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: <trainjob-name>-runtime-snapshot
  ownerReferences:
    - apiVersion: trainer.kubeflow.org/v1alpha1
      kind: TrainJob
      name: <trainjob-name>
      uid: 12345678-1234-1234-1234-123456789abc
      controller: true
      blockOwnerDeletion: true
data:
  runtime: |
    apiVersion: trainer.kubeflow.org/v1alpha1
    kind: ClusterTrainingRuntime
    metadata:
      name: torch-distributed
      labels:
        trainer.kubeflow.org/framework: torch
    spec:
      mlPolicy:
        numNodes: 1
        torch: {}
      template:
        spec:
          replicatedJobs:
            - name: node
              template:
                metadata:
                  labels:
                    trainer.kubeflow.org/trainjob-ancestor-step: trainer
                spec:
                  template:
                    spec:
                      containers:
                        - name: node
                          image: pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime
"#;

#[test]
fn kep_example_configmap_round_trips() {
    let kep_cm = read::parse_yaml(&KEP_EXAMPLE.replace("<trainjob-name>", "mnist"))
        .expect("the KEP's example is YAML");
    let mut job = trainjob_for(json!({ "name": "torch-distributed" }));
    job["metadata"]["uid"] = json!("12345678-1234-1234-1234-123456789abc");
    assert_eq!(
        kep_cm["metadata"]["name"],
        json!(names::snapshot_name("mnist"))
    );

    // Read as Trainer reads it (the CRD defaults fill in apiGroup and kind).
    let kep = read_snapshot(&kep_cm, &job).expect("the KEP's example is a valid snapshot");
    assert_eq!(kep.writer, Writer::Trainer);
    assert_eq!(
        kep.runtime["spec"]["mlPolicy"],
        json!({ "numNodes": 1, "torch": {} })
    );

    // The same runtime served live, snapshotted by holdfast, read back: the same object.
    let mut live = kep.runtime.clone();
    live["metadata"]["uid"] = json!("3b0e6a52-7f7d-4f39-9a8e-2d1c0b9a8f77");
    live["metadata"]["resourceVersion"] = json!("1001");
    live["metadata"]["generation"] = json!(1);
    let ours = holdfast_snapshot_of(&live, &job);
    let back = read_snapshot(&ours, &job).expect("read");
    assert_eq!(back.runtime, kep.runtime);
    assert_eq!(
        yaml_of(&ours),
        render(&kep.runtime_with_identity()).expect("render").yaml
    );
    assert!(!drifted(&back.runtime, &live));
    assert!(!drifted(&kep.runtime, &live));
}

trait WithIdentity {
    fn runtime_with_identity(&self) -> Value;
}

impl WithIdentity for SnapshotRuntime {
    /// The snapshot's runtime with server fields added, as if served.
    fn runtime_with_identity(&self) -> Value {
        let mut v = self.runtime.clone();
        v["metadata"]["uid"] = json!("u");
        v["metadata"]["resourceVersion"] = json!("1");
        v
    }
}

#[test]
fn runtime_ref_applies_crd_defaults() {
    assert_eq!(
        runtime_ref(&trainjob_for(json!({ "name": "torch-distributed" }))),
        Ok(RuntimeRef {
            api_group: "trainer.kubeflow.org".to_owned(),
            kind: "ClusterTrainingRuntime".to_owned(),
            name: "torch-distributed".to_owned(),
        })
    );
    let explicit = runtime_ref(&trainjob_for(json!({
        "apiGroup": "hpc.example.com", "kind": "SlurmRuntime", "name": "a100"
    })))
    .expect("ref");
    assert_eq!(explicit.to_string(), "SlurmRuntime.hpc.example.com/a100");
    assert!(explicit.matches_api_version("hpc.example.com/v1beta2"));
    assert!(!explicit.matches_api_version("v1"));

    let missing_name = runtime_ref(&trainjob_for(json!({ "kind": "TrainingRuntime" })));
    assert_eq!(
        missing_name,
        Err(SnapshotError::MissingField {
            object: "TrainJob",
            field: "spec.runtimeRef.name"
        })
    );
    let no_ref = runtime_ref(&json!({ "spec": {} })).expect_err("no ref");
    assert_eq!(no_ref.metric_label(), "missing_field");
    let bad_kind = runtime_ref(&trainjob_for(json!({ "kind": 7, "name": "x" }))).expect_err("bad");
    assert_eq!(bad_kind.metric_label(), "invalid_field");
}

#[test]
fn runtime_not_served_by_an_apiserver_is_refused() {
    for (field, pointer) in [
        ("apiVersion", "/apiVersion"),
        ("kind", "/kind"),
        ("metadata.name", "/metadata/name"),
        ("metadata.uid", "/metadata/uid"),
        ("metadata.resourceVersion", "/metadata/resourceVersion"),
    ] {
        let mut runtime = served_cluster_runtime();
        let (parent, key) = pointer.rsplit_once('/').expect("pointer");
        let parent = if parent.is_empty() {
            &mut runtime
        } else {
            runtime.pointer_mut(parent).expect("parent")
        };
        parent.as_object_mut().expect("object").remove(key);
        assert_eq!(
            render(&runtime),
            Err(SnapshotError::MissingField {
                object: "runtime",
                field
            })
        );
    }
    assert!(matches!(
        render(&json!("not an object")),
        Err(SnapshotError::InvalidField { .. })
    ));
    // A TrainJob without uid cannot own a snapshot.
    let rendered = render(&served_cluster_runtime()).expect("render");
    let mut job = trainjob();
    job["metadata"].as_object_mut().expect("meta").remove("uid");
    assert_eq!(
        snapshot_configmap(&job, &rendered),
        Err(SnapshotError::MissingField {
            object: "TrainJob",
            field: "metadata.uid"
        })
    );
    assert!(matches!(
        read_snapshot(&trainer_written_configmap(JOB_UID), &job),
        Err(SnapshotFault::TrainJob(_))
    ));
}

/// Strings a YAML 1.1 reader (Go's yaml.v2, under Trainer's sigs.k8s.io/yaml) would take for
/// something else. Each was checked against sigs.k8s.io/yaml v1.6.0 + go.yaml.in/yaml/v2
/// v2.4.3, the versions Trainer v2.3.0 builds with: all decode back to the same strings.
const YAML11_LOOKALIKES: &[&str] = &[
    "on",
    "off",
    "yes",
    "no",
    "y",
    "n",
    "Y",
    "N",
    "On",
    "OFF",
    "true",
    "False",
    "null",
    "Null",
    "~",
    "",
    " ",
    "0755",
    "0o17",
    "0x1F",
    "0b101",
    "1_000",
    "1e3",
    ".5",
    "+1",
    "-1",
    "1.0",
    ".inf",
    "-.Inf",
    ".NaN",
    "1:30",
    "190:20:30",
    "2026-01-01",
    "2026-1-1",
    "2001-12-14t21:59:43.10-05:00",
    "<<",
    "=",
    "- a",
    "a: b",
    "a #b",
    "#c",
    "@x",
    "`x",
    "!tag",
    "&anc",
    "*ali",
    "%d",
    "|",
    ">",
    "{a}",
    "[a]",
    "'q'",
    "\"dq\"",
    "tab\t",
    "trailing ",
    " leading",
    "multi\nline",
    "multi\nline\n\n",
    "  indented\nnext",
    "crlf\r\nline",
    "\u{feff}bom",
    "ctrl\u{1}",
    "08",
    "09.5",
    "-0",
    "1__0",
    "_1",
    "1Gi",
    "500m",
];

#[test]
fn yaml_1_1_lookalike_strings_stay_strings() {
    for s in YAML11_LOOKALIKES {
        for value in [json!(s), json!({ *s: s }), json!([s])] {
            let yaml = render::to_yaml(&value).expect("yaml");
            assert_eq!(
                read::parse_yaml(&yaml).expect("parse"),
                value,
                "{s:?} became {yaml:?}"
            );
        }
    }
}

#[test]
fn metric_labels_are_bounded() {
    let faults = [
        SnapshotFault::Squatted {
            owner: Some("x".into()),
        },
        SnapshotFault::Malformed { reason: "x".into() },
        SnapshotFault::Mismatch {
            field: RefField::Kind,
            expected: "a".into(),
            found: "b".into(),
        },
        SnapshotFault::TrainJob(SnapshotError::Yaml("x".into())),
    ];
    let errors = [
        SnapshotError::MissingField {
            object: "runtime",
            field: "kind",
        },
        SnapshotError::InvalidField {
            object: "runtime",
            field: "kind",
            expected: "a string",
        },
        SnapshotError::WrongRuntime {
            field: RefField::Name,
            expected: "a".into(),
            found: "b".into(),
        },
        SnapshotError::Yaml("boom".into()),
        SnapshotError::TooLarge { bytes: 2, limit: 1 },
    ];
    let labels: Vec<&str> = faults
        .iter()
        .map(SnapshotFault::metric_label)
        .chain(errors.iter().map(SnapshotError::metric_label))
        .collect();
    for label in &labels {
        assert!(
            label.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
            "{label}"
        );
    }
    let mut distinct = labels.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        labels.len(),
        "labels must tell variants apart"
    );
    // No object name ever reaches a label.
    assert_eq!(faults[0].metric_label(), "squatted");
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        (-1.0e12f64..1.0e12).prop_map(|f| json!(f)),
        any::<String>().prop_map(Value::String),
        prop::sample::select(YAML11_LOOKALIKES).prop_map(|s| json!(s)),
    ]
}

fn json_tree() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    /// Whatever a runtime's spec holds, its snapshot reads back as exactly that spec.
    #[test]
    fn any_spec_survives_the_snapshot(spec in json_tree()) {
        let mut runtime = served_cluster_runtime();
        runtime["spec"] = spec.clone();
        let cm = holdfast_snapshot_of(&runtime, &trainjob());
        let read = read_snapshot(&cm, &trainjob()).expect("read");
        prop_assert!(!drifted(&read.runtime, &runtime));
        prop_assert_eq!(&read.runtime["spec"], &spec);
    }
}
