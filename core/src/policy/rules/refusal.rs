//! What the Rust rules' refusals share: the field a refusal names, and the refusal of a
//! request the rules cannot read.

use super::rule::Rule;
use crate::policy::object::Doc;
use crate::policy::{AdmissionInput, Verdict};

/// The refusal of a request whose `side` (`object` or `oldObject`) the rule needs and cannot
/// read; `what` says what it could not tell.
pub(crate) fn malformed(input: &AdmissionInput, side: &str, doc: Doc<'_>, what: &str) -> Verdict {
    Verdict::deny(
        Rule::Malformed,
        side,
        format!(
            "malformed admission request: {side} is {}; {what}, so the {} by user {} is refused",
            doc.problem(),
            input.operation,
            input.user.username
        ),
    )
}

/// The refusal of an UPDATE whose object or stored object (the first missing) the rule needs
/// and cannot read, to check what it changes in `what`.
pub(crate) fn malformed_update(
    input: &AdmissionInput,
    new: Doc<'_>,
    old: Doc<'_>,
    what: &str,
) -> Verdict {
    let (side, doc) = if new.object().is_none() {
        ("object", new)
    } else {
        ("oldObject", old)
    };
    malformed(
        input,
        side,
        doc,
        &format!("cannot check what this update changes in {what}"),
    )
}

/// `metadata.annotations[key]`, as a refusal names it.
pub(crate) fn annotation_field(key: &str) -> String {
    format!("metadata.annotations[{key}]")
}

/// `metadata.labels[key]`, as a refusal names it.
pub(crate) fn label_field(key: &str) -> String {
    format!("metadata.labels[{key}]")
}
