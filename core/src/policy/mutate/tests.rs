#![allow(clippy::unwrap_used)]

use super::{Mutation, mutate, runtime_to_record};
use crate::mode::Mode;
use crate::names::{
    ANN_ADMITTED_RUNTIME_RESOURCE_VERSION as ADMITTED, ANN_ATTEMPT, ANN_HOLD_HOLDER,
    ANN_HOLD_INSTANCE, ANN_HOLD_PLACED_AT, ANN_HOLD_REASON, ANN_OPENED, LABEL_MANAGED,
};
use crate::policy::testkit::*;
use crate::policy::{Operation, Resource, validate};
use json_patch::PatchOperation;
use serde_json::{Value, json};

const MANAGED: (&str, &str) = (LABEL_MANAGED, "true");
const HOLD: [(&str, &str); 3] = [
    (ANN_HOLD_INSTANCE, "3"),
    (ANN_HOLD_REASON, "node lost"),
    (ANN_HOLD_PLACED_AT, "2026-11-29T12:00:00Z"),
];

fn update(resource: Resource, user: &str, old: &Value, new: &Value) -> Vec<PatchOperation> {
    let i = input(resource, Operation::Update, user, Some(old), Some(new));
    mutate(&i, &who(), Mode::Plain, None).patch
}

fn create(mode: Mode, new: &Value, rv: Option<&str>) -> Vec<PatchOperation> {
    let i = input(
        Resource::TrainJob,
        Operation::Create,
        ALICE,
        None,
        Some(new),
    );
    mutate(&i, &who(), mode, rv).patch
}

fn anns(v: &Value) -> Value {
    v["metadata"]["annotations"].clone()
}

#[test]
fn replace_that_drops_hold_annotations_is_restored() {
    let old = tj(
        &[
            HOLD[0],
            HOLD[1],
            HOLD[2],
            (ANN_HOLD_HOLDER, "system:serviceaccount:team-a:dispatch"),
            (ANN_OPENED, "true"),
            (ANN_ATTEMPT, "2"),
            ("team", "x"),
        ],
        &[],
        Some(true),
    );
    // `kubectl replace` of the manifest the user kept: no holdfast annotations, and the
    // user's own annotation changed.
    let replaced = tj(&[("team", "y")], &[], Some(true));
    for resource in [Resource::TrainJob, Resource::Workload] {
        let patch = update(resource.clone(), ALICE, &old, &replaced);
        assert_eq!(patch.len(), 6, "{patch:?}");
        let patched = apply(&replaced, &patch);
        assert_eq!(
            anns(&patched),
            json!({
                ANN_HOLD_INSTANCE: "3", ANN_HOLD_REASON: "node lost", ANN_HOLD_PLACED_AT: "2026-11-29T12:00:00Z",
                ANN_HOLD_HOLDER: "system:serviceaccount:team-a:dispatch",
                ANN_OPENED: "true", ANN_ATTEMPT: "2", "team": "y"
            })
        );
        // ...and the validating side then lets the replace through.
        let i = input(
            resource,
            Operation::Update,
            ALICE,
            Some(&old),
            Some(&patched),
        );
        assert!(validate(&i, &who(), Mode::Plain).is_allowed());
    }
}

#[test]
fn restore_escapes_the_slash_in_annotation_keys() {
    let old = tj(&[HOLD[0]], &[], Some(true));
    let patch = update(
        Resource::TrainJob,
        ALICE,
        &old,
        &tj(&[("a", "b")], &[], Some(true)),
    );
    let json = serde_json::to_value(&patch).unwrap();
    assert_eq!(
        json,
        json!([{"op": "add", "path": "/metadata/annotations/holdfast.dev~1hold-instance", "value": "3"}])
    );
}

#[test]
fn restore_adds_the_whole_annotation_map_when_none_is_left() {
    let old = tj(&HOLD, &[], Some(true));
    let replaced = with(&old, |v| {
        v["metadata"].as_object_mut().unwrap().remove("annotations");
    });
    let patch = update(Resource::TrainJob, ALICE, &old, &replaced);
    assert_eq!(patch.len(), 1);
    assert_eq!(anns(&apply(&replaced, &patch)), anns(&old));
    // null is the same as absent
    let nulled = with(&old, |v| v["metadata"]["annotations"] = Value::Null);
    assert_eq!(
        anns(&apply(
            &nulled,
            &update(Resource::TrainJob, ALICE, &old, &nulled)
        )),
        anns(&old)
    );
}

#[test]
fn restore_adds_metadata_when_none_is_left() {
    let old = tj(&HOLD, &[], Some(true));
    let bare = json!({"spec": {"suspend": true}});
    let patched = apply(&bare, &update(Resource::TrainJob, ALICE, &old, &bare));
    assert_eq!(anns(&patched), anns(&old));
}

#[test]
fn restore_never_invents_values() {
    // Only annotations the stored object had, with its values; a changed value is left for
    // the validating side to refuse; nothing is added that the stored object lacked.
    let old = tj(
        &[(ANN_HOLD_INSTANCE, "3"), (ANN_ATTEMPT, "2")],
        &[],
        Some(true),
    );
    let new = tj(&[(ANN_HOLD_INSTANCE, "4")], &[], Some(true));
    let patch = update(Resource::TrainJob, ALICE, &old, &new);
    let patched = apply(&new, &patch);
    assert_eq!(
        anns(&patched),
        json!({ANN_HOLD_INSTANCE: "4", ANN_ATTEMPT: "2"})
    );
    for op in &patch {
        match op {
            PatchOperation::Add(a) => {
                let key = a
                    .path
                    .to_string()
                    .replace("~1", "/")
                    .replace("/metadata/annotations/", "");
                assert_eq!(
                    Some(&a.value),
                    old["metadata"]["annotations"].get(&key),
                    "{op:?}"
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let i = input(
        Resource::TrainJob,
        Operation::Update,
        ALICE,
        Some(&old),
        Some(&patched),
    );
    assert!(!validate(&i, &who(), Mode::Plain).is_allowed());
    // Nothing stored, nothing restored.
    assert!(
        update(
            Resource::TrainJob,
            ALICE,
            &tj(&[], &[], None),
            &tj(&[], &[], None)
        )
        .is_empty()
    );
}

#[test]
fn controller_release_is_not_restored() {
    let old = wl(&HOLD, Some(false));
    let released = wl(&[], Some(true));
    assert!(update(Resource::Workload, CONTROLLER, &old, &released).is_empty());
}

#[test]
fn no_patch_when_nothing_was_dropped() {
    let old = tj(&HOLD, &[], Some(true));
    assert!(update(Resource::TrainJob, ALICE, &old, &old).is_empty());
    assert!(update(Resource::ConfigMap, ALICE, &old, &tj(&[], &[], None)).is_empty());
}

#[test]
fn status_writes_get_no_patch() {
    let old = tj(&HOLD, &[], Some(true));
    let mut i = input(
        Resource::TrainJob,
        Operation::Update,
        ALICE,
        Some(&old),
        Some(&tj(&[], &[], None)),
    );
    i.subresource = Some("status".into());
    assert!(mutate(&i, &who(), Mode::Plain, None).is_empty());
}

#[test]
fn garbage_annotations_are_left_for_validate() {
    let old = tj(&HOLD, &[], Some(true));
    let garbage = with(&old, |v| v["metadata"]["annotations"] = json!([1, 2]));
    assert!(update(Resource::TrainJob, ALICE, &old, &garbage).is_empty());
    let i = input(
        Resource::TrainJob,
        Operation::Update,
        ALICE,
        Some(&old),
        Some(&garbage),
    );
    assert!(!validate(&i, &who(), Mode::Plain).is_allowed());
}

#[test]
fn managed_trainjob_created_suspended_in_plain_mode() {
    for suspend in [None, Some(false)] {
        let job = tj(&[], &[MANAGED], suspend);
        let patch = create(Mode::Plain, &job, None);
        assert_eq!(patch.len(), 1, "{patch:?}");
        let patched = apply(&job, &patch);
        assert_eq!(patched["spec"]["suspend"], json!(true));
        assert_eq!(patched["spec"]["runtimeRef"], job["spec"]["runtimeRef"]);
        let i = input(
            Resource::TrainJob,
            Operation::Create,
            ALICE,
            None,
            Some(&patched),
        );
        assert!(validate(&i, &who(), Mode::Plain).is_allowed());
    }
    // already suspended: no patch
    assert!(create(Mode::Plain, &tj(&[], &[MANAGED], Some(true)), None).is_empty());
    // no spec at all
    let specless = json!({"metadata": {"name": "m", "labels": {LABEL_MANAGED: "true"}}});
    assert_eq!(
        apply(&specless, &create(Mode::Plain, &specless, None))["spec"],
        json!({"suspend": true})
    );
}

#[test]
fn unmanaged_trainjob_is_not_suspended() {
    assert!(create(Mode::Plain, &tj(&[], &[], None), None).is_empty());
    assert!(create(Mode::Plain, &tj(&[], &[(LABEL_MANAGED, "yes")], None), None).is_empty());
}

#[test]
fn managed_trainjob_is_not_suspended_in_kueue_mode() {
    // Kueue owns spec.suspend in kueue mode; its own webhook suspends at create.
    assert!(create(Mode::Kueue, &tj(&[], &[MANAGED], Some(false)), None).is_empty());
}

#[test]
fn admitted_runtime_resource_version_is_recorded_at_create() {
    let job = tj(&[], &[], None);
    let patched = apply(&job, &create(Mode::Kueue, &job, Some("1234")));
    assert_eq!(anns(&patched), json!({ADMITTED: "1234"}));
    let bare = json!({"metadata": {"name": "m"}, "spec": {}});
    assert_eq!(
        anns(&apply(&bare, &create(Mode::Kueue, &bare, Some("7")))),
        json!({ADMITTED: "7"})
    );
    let no_meta = json!({"spec": {}});
    assert_eq!(
        anns(&apply(&no_meta, &create(Mode::Kueue, &no_meta, Some("7")))),
        json!({ADMITTED: "7"})
    );
}

#[test]
fn forged_admitted_runtime_resource_version_is_overwritten() {
    let forged = tj(&[(ADMITTED, "1")], &[], None);
    let patched = apply(&forged, &create(Mode::Plain, &forged, Some("99")));
    assert_eq!(anns(&patched), json!({ADMITTED: "99"}));
    // the right value already: no patch
    assert!(create(Mode::Plain, &tj(&[(ADMITTED, "99")], &[], None), Some("99")).is_empty());
}

#[test]
fn forged_admitted_runtime_resource_version_is_removed_when_the_runtime_was_not_read() {
    let forged = tj(&[(ADMITTED, "1"), ("x", "y")], &[], None);
    let patched = apply(&forged, &create(Mode::Plain, &forged, None));
    assert_eq!(anns(&patched), json!({"x": "y"}));
    assert!(create(Mode::Plain, &tj(&[], &[], None), None).is_empty());
}

#[test]
fn create_patches_combine() {
    let job = json!({"metadata": {"name": "m", "labels": {LABEL_MANAGED: "true"}, "annotations": {ADMITTED: "0"}}});
    let patched = apply(&job, &create(Mode::Plain, &job, Some("5")));
    assert_eq!(patched["spec"]["suspend"], json!(true));
    assert_eq!(anns(&patched), json!({ADMITTED: "5"}));
}

#[test]
fn workload_and_configmap_creates_get_no_patch() {
    for r in [Resource::Workload, Resource::ConfigMap] {
        let obj = tj(&[(ADMITTED, "1")], &[MANAGED], None);
        let i = input(r, Operation::Create, ALICE, None, Some(&obj));
        assert!(mutate(&i, &who(), Mode::Plain, Some("9")).is_empty());
    }
}

#[test]
fn garbage_objects_get_no_patch() {
    for g in [
        json!(1),
        json!("x"),
        json!([]),
        json!({"metadata": 1, "spec": []}),
    ] {
        assert!(create(Mode::Plain, &g, Some("1")).is_empty(), "{g}");
        assert!(
            update(Resource::TrainJob, ALICE, &tj(&HOLD, &[], None), &g).is_empty(),
            "{g}"
        );
        assert!(
            update(Resource::TrainJob, ALICE, &g, &tj(&[], &[], None)).is_empty(),
            "{g}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// What mutate says it did

#[test]
fn a_restore_names_its_keys_and_warns_without_the_admitted_version() {
    let old = tj(
        &[
            HOLD[0],
            (ANN_OPENED, "true"),
            (ADMITTED, "4"),
            ("team", "x"),
        ],
        &[],
        Some(true),
    );
    let replaced = tj(&[("team", "x")], &[], Some(true));
    let i = input(
        Resource::Workload,
        Operation::Update,
        ALICE,
        Some(&old),
        Some(&replaced),
    );
    let m = mutate(&i, &who(), Mode::Plain, None);
    assert_eq!(m.restored, [ADMITTED, ANN_HOLD_INSTANCE, ANN_OPENED]);
    assert!(!m.gate_closed);
    assert_eq!(
        m.warnings,
        [format!(
            "holdfast kept annotation(s) {ANN_HOLD_INSTANCE}, {ANN_OPENED} on Workload team-a/mnist: this update removed them, and they are written only by the holdfast controller"
        )]
    );
    // The whole map or the whole metadata put back name their keys alike.
    for bare in [
        json!({"metadata": {"name": "mnist"}}),
        json!({"spec": {"suspend": true}}),
    ] {
        let i = input(
            Resource::TrainJob,
            Operation::Update,
            ALICE,
            Some(&old),
            Some(&bare),
        );
        let m = mutate(&i, &who(), Mode::Plain, None);
        assert_eq!(m.patch.len(), 1, "{bare}");
        assert_eq!(m.restored, [ADMITTED, ANN_HOLD_INSTANCE, ANN_OPENED]);
        assert_eq!(m.warnings.len(), 1);
    }
    // Only the admitted version dropped: restored, and nothing to tell.
    let i = input(
        Resource::TrainJob,
        Operation::Update,
        ALICE,
        Some(&tj(&[(ADMITTED, "4")], &[], None)),
        Some(&tj(&[], &[], None)),
    );
    let m = mutate(&i, &who(), Mode::Plain, None);
    assert_eq!(m.restored, [ADMITTED]);
    assert!(m.warnings.is_empty(), "{m:?}");
}

#[test]
fn annotations_that_cannot_be_written_are_not_called_restored() {
    let old = tj(&HOLD, &[], Some(true));
    let garbage = with(&old, |v| v["metadata"]["annotations"] = json!([1, 2]));
    let i = input(
        Resource::TrainJob,
        Operation::Update,
        ALICE,
        Some(&old),
        Some(&garbage),
    );
    assert_eq!(mutate(&i, &who(), Mode::Plain, None), Mutation::default());
}

#[test]
fn closing_the_start_gate_is_said_and_warned_but_the_admitted_version_is_silent() {
    let job = tj(&[(ADMITTED, "1")], &[MANAGED], None);
    let i = input(
        Resource::TrainJob,
        Operation::Create,
        ALICE,
        None,
        Some(&job),
    );
    let m = mutate(&i, &who(), Mode::Plain, Some("5"));
    assert!(m.gate_closed);
    assert!(m.restored.is_empty());
    assert_eq!(
        m.warnings,
        [
            "holdfast set spec.suspend: true on TrainJob team-a/mnist: a TrainJob labelled holdfast.dev/managed=true starts at its closed start gate, opened by the holdfast controller"
        ]
    );
    // Kueue mode, or a spec that is not an object: the gate is not closed here.
    assert!(!mutate(&i, &who(), Mode::Kueue, Some("5")).gate_closed);
    let odd = with(&job, |v| v["spec"] = json!([1]));
    let i = input(
        Resource::TrainJob,
        Operation::Create,
        ALICE,
        None,
        Some(&odd),
    );
    let m = mutate(&i, &who(), Mode::Plain, Some("5"));
    assert!(!m.gate_closed && m.warnings.is_empty(), "{m:?}");
    assert_eq!(m.patch.len(), 1, "the admitted version alone");
}

#[test]
fn the_runtime_to_record_is_named_at_a_trainjob_create_only() {
    let job = tj(&[], &[], None);
    let at = |resource: Resource, op: Operation, sub: Option<&str>, obj: Option<&Value>| {
        let mut i = input(resource, op, ALICE, None, obj);
        i.subresource = sub.map(str::to_owned);
        runtime_to_record(&i)
    };
    let named = at(Resource::TrainJob, Operation::Create, None, Some(&job));
    assert_eq!(
        named.unwrap().unwrap(),
        crate::snapshot::runtime_ref(&job).unwrap()
    );
    assert!(at(Resource::TrainJob, Operation::Update, None, Some(&job)).is_none());
    assert!(at(Resource::Workload, Operation::Create, None, Some(&job)).is_none());
    assert!(
        at(
            Resource::TrainJob,
            Operation::Create,
            Some("status"),
            Some(&job)
        )
        .is_none()
    );
    assert!(at(Resource::TrainJob, Operation::Create, None, None).is_none());
    // Whatever the object, the same answer as reading the whole TrainJob.
    for odd in [
        json!(1),
        json!({"spec": 1}),
        json!({"spec": {}}),
        json!({"spec": {"runtimeRef": null}}),
        json!({"spec": {"runtimeRef": {"kind": 1}}}),
        json!({"spec": {"runtimeRef": {"name": "t", "apiGroup": "g", "kind": "K"}}}),
    ] {
        assert_eq!(
            at(Resource::TrainJob, Operation::Create, None, Some(&odd)),
            Some(crate::snapshot::runtime_ref(&odd)),
            "{odd}"
        );
    }
}
