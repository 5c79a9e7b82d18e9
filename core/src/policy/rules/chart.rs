//! The chart's policy files, rendered from the rows: `templates/admissionpolicies.yaml` (the
//! three ValidatingAdmissionPolicies and their bindings), `templates/_rule_conditions.tpl`
//! (the match conditions both engines share) and `templates/_cel.tpl` (the CEL building
//! blocks the chart's hand-written CEL shares with the rows). They are Helm templates still:
//! the identities and the mode are the chart's values.

use super::cel::{carries, managed, queue, same_map, suspended, trainjob_owners};
use super::conditions::{Condition, conditions};
use super::{Modes, Policy, Validation, Variable, unheld_in_plain_mode, validations, variables};
use std::fmt::Write as _;

/// The chart's path of the policies' template, from the repository's root.
pub const POLICIES_PATH: &str = "charts/holdfast/templates/admissionpolicies.yaml";
/// The chart's path of the match conditions' template, from the repository's root.
pub const CONDITIONS_PATH: &str = "charts/holdfast/templates/_rule_conditions.tpl";
/// The chart's path of the CEL building blocks' template, from the repository's root.
pub const CEL_PATH: &str = "charts/holdfast/templates/_cel.tpl";

const GENERATED: &str = "Generated from core/src/policy/rules (cargo test -p holdfast-core policy::rules::chart;\nHOLDFAST_BLESS=1 rewrites it): change the rules there, not here.";

/// `templates/admissionpolicies.yaml`.
pub fn policies_template() -> String {
    let mut out = format!(
        "{{{{- /*\n{GENERATED}\n\n\
The validating rules as ValidatingAdmissionPolicies (validation.engine: policy or both): CEL\n\
evaluated inside the apiserver, so no network hop and nothing that can go down. They decide\n\
what the webhook's validating rules decide (holdfast_core::policy::validate): a test of\n\
holdfast-core evaluates this CEL beside the Rust rules over their case table and compares the\n\
rule that refuses, and tests/tests/it/validation_engines.rs compares the verdicts through the\n\
real apiserver. Match constraints and match conditions are the webhook entries' own, so the\n\
same requests are judged. What CEL cannot do stays in the webhook: the queue and Workload\n\
lookups, and every mutation (the book: operating/validation-engines.md). One policy per kind,\n\
so the apiserver's type check reads each rule against its own kind's schema. Every message\n\
ends with the rule's id, as the webhook's do.\n\
*/ -}}}}\n\
{{{{- if ne (include \"holdfast.engine\" .) \"webhook\" }}}}\n\
{{{{- $name := include \"holdfast.webhookConfigName\" . -}}}}\n\
{{{{- $excluded := include \"holdfast.excludedNamespaces\" . -}}}}\n\
{{{{- $controllerList := include \"holdfast.controllerUsers\" . | fromJsonArray -}}}}\n\
{{{{- $controllers := include \"holdfast.cel.list\" $controllerList -}}}}\n\
{{{{- $deletersProper := include \"holdfast.cel.list\" .Values.identities.snapshotDeleters -}}}}\n\
{{{{- $kueueUsers := include \"holdfast.cel.list\" .Values.identities.kueueUsers -}}}}\n\
{{{{- $ctlDesc := printf \"the holdfast controller (%s)\" (include \"holdfast.describe\" $controllerList) -}}}}\n\
{{{{- $kueueDesc := printf \"Kueue (%s)\" (include \"holdfast.describe\" .Values.identities.kueueUsers) -}}}}\n\
{{{{- $creatorsDesc := printf \"%s and the snapshot creators (%s)\" $ctlDesc (include \"holdfast.describe\" .Values.identities.snapshotCreators) -}}}}\n\
{{{{- $deletersDesc := printf \"%s and the snapshot deleters (%s)\" $ctlDesc (include \"holdfast.describe\" .Values.identities.snapshotDeleters) -}}}}\n\
{{{{- $kueueMode := eq .Values.mode \"kueue\" -}}}}\n\
{{{{- $unheldInPlainMode := ternary \"\" \"{}\" $kueueMode -}}}}\n",
        unheld_in_plain_mode()
    );
    let rows = validations();
    for (i, policy) in Policy::ALL.into_iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        policy_document(&mut out, policy, &rows);
    }
    out.push_str("{{- end }}\n");
    out
}

fn policy_document(out: &mut String, policy: Policy, rows: &[Validation]) {
    let p = policy.suffix();
    let (group, version, operations, conditions) = match policy {
        Policy::Snapshots => ("\"\"", "\"v1\"", "CREATE, UPDATE, DELETE", "snapshots"),
        Policy::TrainJobs => ("trainer.kubeflow.org", "\"*\"", "CREATE, UPDATE", "jobs"),
        Policy::Workloads => ("kueue.x-k8s.io", "\"*\"", "CREATE, UPDATE", "jobs"),
    };
    let resource = if policy == Policy::Snapshots {
        "configmaps"
    } else {
        p
    };
    head(out, "ValidatingAdmissionPolicy", p);
    let _ = write!(
        out,
        "spec:\n\
\x20 failurePolicy: Fail\n\
\x20 matchConstraints:\n\
\x20   namespaceSelector:\n\
\x20     matchExpressions:\n\
\x20       - key: kubernetes.io/metadata.name\n\
\x20         operator: NotIn\n\
\x20         values: {{{{ $excluded }}}}\n\
\x20   resourceRules:\n\
\x20     - apiGroups: [{group}]\n\
\x20       apiVersions: [{version}]\n\
\x20       resources: [{resource}]\n\
\x20       operations: [{operations}]\n\
\x20       scope: Namespaced\n\
\x20 # The webhook entry's own conditions: every write the rules refuse meets them\n\
\x20 # (tests/tests/it/match_conditions.rs).\n\
\x20 matchConditions:\n\
\x20   {{{{- include \"holdfast.conditions.{conditions}\" . | nindent 4 }}}}\n\
\x20 variables:\n"
    );
    for v in variables(policy) {
        variable(out, &v);
    }
    out.push_str(
        "  # Every refusal is 403 Forbidden, as the webhook's are (the default reason is Invalid, 422).\n  validations:\n",
    );
    let mut open: Option<Modes> = None;
    for r in rows.iter().filter(|r| r.policy == policy) {
        if open != Some(r.modes) {
            if open.is_some_and(|m| m != Modes::Both) {
                out.push_str("    {{- end }}\n");
            }
            match r.modes {
                Modes::Both => {}
                Modes::Kueue => out.push_str("    {{- if $kueueMode }}\n"),
                Modes::Plain => out.push_str("    {{- if not $kueueMode }}\n"),
            }
            open = Some(r.modes);
        }
        validation(out, r);
    }
    if open.is_some_and(|m| m != Modes::Both) {
        out.push_str("    {{- end }}\n");
    }
    out.push_str("---\n");
    head(out, "ValidatingAdmissionPolicyBinding", p);
    let _ = write!(
        out,
        "spec:\n\
\x20 policyName: {{{{ $name }}}}-{p}\n\
\x20 validationActions: [Deny]\n"
    );
}

/// An object's head: its apiVersion, `kind`, and metadata (named `<fullname>-<suffix>`, with
/// the webhook component's labels).
fn head(out: &mut String, kind: &str, suffix: &str) {
    let _ = write!(
        out,
        "apiVersion: admissionregistration.k8s.io/v1\n\
kind: {kind}\n\
metadata:\n\
\x20 name: {{{{ $name }}}}-{suffix}\n\
\x20 labels:\n\
\x20   {{{{- include \"holdfast.componentLabels\" (list . \"webhook\") | nindent 4 }}}}\n"
    );
}

/// `text` as the lines of a YAML block scalar at `indent` spaces.
fn block(out: &mut String, indent: usize, text: &str) {
    for line in text.lines() {
        let _ = writeln!(out, "{:indent$}{line}", "");
    }
}

/// `note` as YAML comments at `indent` spaces, wrapped before column 100.
fn comment(out: &mut String, indent: usize, note: &str) {
    let mut line = String::new();
    for word in note.split_whitespace() {
        if !line.is_empty() && indent + 2 + line.len() + 1 + word.len() > 96 {
            let _ = writeln!(out, "{:indent$}# {line}", "");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{:indent$}# {line}", "");
    }
}

fn variable(out: &mut String, v: &Variable) {
    comment(out, 4, v.note);
    let _ = writeln!(out, "    - name: {}\n      expression: |-", v.name);
    block(out, 8, &v.expression);
}

fn validation(out: &mut String, r: &Validation) {
    comment(out, 4, r.note);
    let _ = writeln!(out, "    # rule {}", r.rule);
    out.push_str("    - expression: |-\n");
    block(out, 8, &r.expression);
    out.push_str("      messageExpression: |-\n");
    block(out, 8, &r.message);
    out.push_str("      reason: Forbidden\n");
}

/// `templates/_rule_conditions.tpl`.
pub fn conditions_template() -> String {
    let mut out = format!(
        "{{{{/*\n{GENERATED}\n\n\
The match conditions of the validating rules, one definition for both engines: the webhook's\n\
validating entries (webhookconfigurations.yaml) and the policies (admissionpolicies.yaml)\n\
judge the same requests. tests/tests/it/match_conditions.rs proves through the apiserver that\n\
they send every request the rules refuse.\n\
*/}}}}\n\n\
{{{{/* The snapshot rules': every write of a snapshot ConfigMap but those the requester's\n\
identity alone decides. */}}}}\n\
{{{{- define \"holdfast.conditions.snapshots\" -}}}}\n\
{{{{- $creators := include \"holdfast.cel.list\" (concat (include \"holdfast.controllerUsers\" . | fromJsonArray) .Values.identities.snapshotCreators) -}}}}\n\
{{{{- $deleters := include \"holdfast.cel.list\" (concat (include \"holdfast.controllerUsers\" . | fromJsonArray) .Values.identities.snapshotDeleters) -}}}}\n"
    );
    condition_items(&mut out, &conditions(Policy::Snapshots));
    out.push_str(
        "{{- end -}}\n\n\
{{/* The TrainJob and Workload rules': a write that changes holdfast's state or what the rules\n\
guard, by anyone but the controller (in kueue mode the controller's suspend flips too), and\n\
Kueue's only where a rule judges Kueue. */}}\n\
{{- define \"holdfast.conditions.jobs\" -}}\n\
{{- $controllers := include \"holdfast.cel.list\" (include \"holdfast.controllerUsers\" . | fromJsonArray) -}}\n\
{{- $kueue := include \"holdfast.cel.list\" .Values.identities.kueueUsers -}}\n\
{{- $kueueMode := eq .Values.mode \"kueue\" -}}\n",
    );
    condition_items(&mut out, &conditions(Policy::TrainJobs));
    out.push_str("{{- end -}}\n");
    out
}

/// The conditions as a YAML list: a name with a variant per mode gets `if`/`else` around its
/// expression, a name of one mode is rendered in that mode only.
fn condition_items(out: &mut String, items: &[Condition]) {
    let mut i = 0;
    while let Some(c) = items.get(i) {
        let twin = items
            .get(i + 1)
            .filter(|d| d.name == c.name && c.modes == Modes::Kueue && d.modes == Modes::Plain);
        match (c.modes, twin) {
            (_, Some(plain)) => {
                let _ = writeln!(out, "- name: {}\n  {{{{- if $kueueMode }}}}", c.name);
                out.push_str("  expression: |-\n");
                block(out, 4, &c.expression);
                out.push_str("  {{- else }}\n  expression: |-\n");
                block(out, 4, &plain.expression);
                out.push_str("  {{- end }}\n");
                i += 2;
                continue;
            }
            (Modes::Both, None) => {
                let _ = writeln!(out, "- name: {}\n  expression: |-", c.name);
                block(out, 4, &c.expression);
            }
            (Modes::Kueue | Modes::Plain, None) => {
                let gate = if c.modes == Modes::Kueue {
                    "$kueueMode"
                } else {
                    "not $kueueMode"
                };
                let _ = writeln!(
                    out,
                    "{{{{- if {gate} }}}}\n- name: {}\n  expression: |-",
                    c.name
                );
                block(out, 4, &c.expression);
                out.push_str("{{- end }}\n");
            }
        }
        i += 1;
    }
}

/// `templates/_cel.tpl`: the CEL building blocks the chart's hand-written CEL uses (the
/// execution-finalizer, readmission-gate and controller policies, and the webhook entries'
/// lookup conditions), as `holdfast.cel.*` helpers rendered from [`cel`](super::cel) with the
/// helper's argument (`{{ . }}`) in place of the object, so that each block has one source.
pub fn cel_template() -> String {
    let arg = "{{ . }}";
    let helpers: [(&str, &str, String); 6] = [
        (
            "carries",
            "the object named by . (object or oldObject) carries holdfast state: an annotation,\nlabel or finalizer whose key starts with holdfast.dev/.",
            carries(arg),
        ),
        (
            "suspended",
            "the object named by . is suspended (spec.suspend: true; absent = false).",
            suspended(arg),
        ),
        (
            "managed",
            "the object named by . is labelled holdfast.dev/managed=true.",
            managed(arg),
        ),
        (
            "queue",
            "the queue the object named by . is in: its queue-name label, or ''.",
            queue(arg),
        ),
        (
            "sameMap",
            "field (a path below object and oldObject, a map) is the same in both; absent and\nempty are the same (the apiserver omits empty maps).",
            same_map(arg),
        ),
        (
            "trainjobOwners",
            "the TrainJob ownerReferences of the object named by . (a list, maybe empty).",
            trainjob_owners(arg),
        ),
    ];
    let mut out = format!("{{{{- /*\n{GENERATED}\n*/ -}}}}\n");
    for (name, what, text) in helpers {
        let _ = write!(
            out,
            "\n{{{{/* CEL: {what} */}}}}\n{{{{- define \"holdfast.cel.{name}\" -}}}}\n{text}\n{{{{- end -}}}}\n"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::path::PathBuf;

    fn repo(path: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(path)
    }

    fn check(path: &str, want: &str) {
        let file = repo(path);
        if std::env::var_os("HOLDFAST_BLESS").is_some() {
            std::fs::write(&file, want).unwrap();
            return;
        }
        let got = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(
            got == want,
            "{path} is not what core/src/policy/rules renders; run\n  HOLDFAST_BLESS=1 cargo test -p holdfast-core policy::rules::chart\n"
        );
    }

    #[test]
    fn the_chart_policies_are_generated_from_the_rules() {
        check(POLICIES_PATH, &policies_template());
    }

    #[test]
    fn the_chart_match_conditions_are_generated_from_the_rules() {
        check(CONDITIONS_PATH, &conditions_template());
    }

    #[test]
    fn the_chart_cel_building_blocks_are_generated_from_the_rules() {
        check(CEL_PATH, &cel_template());
    }
}
