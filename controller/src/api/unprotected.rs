//! Namespaces nothing protects a hold in: the chart keeps its webhook and its admission
//! policies out of `kube-system`, the release namespace and `webhook.excludeNamespaces`, and
//! tells the controller which (`--unprotected-namespaces`). A hold written there is only
//! annotations and `spec.suspend` (or `spec.active`) that anyone allowed to edit the object
//! can take off, so the hold API refuses a Hold there as `Unsupported`, naming why and what to
//! do, instead of answering `Held`. Release, Open and Status are answered as anywhere: lifting
//! a hold placed before the namespace was excluded, or opening a gate, protects nothing less.

use std::collections::BTreeSet;

use holdfast_core::hold::{CallKind, HoldError};

use crate::hold::preflight::{CallSupport, Gated, PreflightReport};

/// The namespaces the chart excludes from admission (empty: every namespace is judged).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unprotected(BTreeSet<String>);

impl Unprotected {
    pub fn new<I, S>(namespaces: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Unprotected(
            namespaces
                .into_iter()
                .map(Into::into)
                .map(|ns: String| ns.trim().to_owned())
                .filter(|ns| !ns.is_empty())
                .collect(),
        )
    }

    /// A targeted preflight's `report` of a TrainJob in `namespace`: Hold is not supported
    /// there, for the reason a Hold would be refused with.
    pub fn mark(&self, report: &mut PreflightReport, namespace: &str) {
        if let Some(HoldError::Unsupported { reason }) = self.refusal(CallKind::Hold, namespace) {
            report.calls.insert(
                Gated::Hold,
                CallSupport {
                    supported: false,
                    reason: Some(reason),
                },
            );
        }
    }

    /// Why a `kind` call on a TrainJob in `namespace` is refused, if it is.
    pub fn refusal(&self, kind: CallKind, namespace: &str) -> Option<HoldError> {
        if kind != CallKind::Hold || !self.0.contains(namespace) {
            return None;
        }
        Some(HoldError::unsupported(format!(
            "namespace {namespace} is excluded from holdfast's admission webhook and policies \
             (kube-system, holdfast's own namespace, or the chart's webhook.excludeNamespaces), \
             so nothing there keeps a hold from being lifted by anyone who may edit the \
             TrainJob; run the job in a namespace holdfast protects, or remove {namespace} \
             from webhook.excludeNamespaces and upgrade the release"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_in_an_excluded_namespace_is_unsupported_naming_why_and_what_to_do() {
        let u = Unprotected::new(["kube-system", " team-x ", ""]);
        let Some(HoldError::Unsupported { reason }) = u.refusal(CallKind::Hold, "team-x") else {
            panic!("a Hold in team-x must be Unsupported");
        };
        assert!(reason.contains("namespace team-x is excluded"), "{reason}");
        assert!(reason.contains("webhook.excludeNamespaces"), "{reason}");
        assert!(matches!(
            u.refusal(CallKind::Hold, "kube-system"),
            Some(HoldError::Unsupported { .. })
        ));
    }

    #[test]
    fn other_calls_and_other_namespaces_are_answered_as_anywhere() {
        let u = Unprotected::new(["team-x"]);
        assert!(u.refusal(CallKind::Hold, "team-a").is_none());
        for kind in [CallKind::Release, CallKind::Open] {
            assert!(u.refusal(kind, "team-x").is_none(), "{kind}");
        }
        assert!(
            Unprotected::default()
                .refusal(CallKind::Hold, "team-x")
                .is_none()
        );
    }
}
