//! The hold on a held object, as its `holdfast.dev/hold-*` annotations record it.

use serde::{Deserialize, Serialize};

use crate::names::{ANN_HOLD_HOLDER, ANN_HOLD_INSTANCE, ANN_HOLD_PLACED_AT, ANN_HOLD_REASON};

/// A readable hold: the `holdfast.dev/hold-*` annotations of the held object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HoldRecord {
    pub instance: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// RFC 3339, as written; not re-parsed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placed_at: Option<String>,
    /// [`ANN_HOLD_HOLDER`]: the username that placed it; `None` for a hold placed before
    /// holdfast recorded holders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
}

/// The hold on a held object. The presence of `holdfast.dev/hold-instance` is the hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HoldState {
    /// No hold-instance annotation.
    Absent,
    /// A hold whose instance is a decimal u64.
    InForce(HoldRecord),
    /// A hold-instance annotation that is not a decimal u64. Only the controller may write
    /// it (the webhook sees to that), so this is damage, not a caller's hold. It is treated
    /// as a hold in force by someone whose instance cannot be compared: it keeps the object
    /// stopped, a Release of any instance is `StaleHold`, and a Hold replaces it (a Hold
    /// only ever stops, so replacing it cannot run anything, while refusing would leave the
    /// object impossible to hold or release). Its holder, if recorded, is still its holder.
    Unreadable {
        value: String,
        holder: Option<String>,
    },
}

impl HoldState {
    /// Reads a hold from an annotation lookup.
    pub fn from_lookup<'a>(get: impl Fn(&str) -> Option<&'a str>) -> HoldState {
        let Some(value) = get(ANN_HOLD_INSTANCE) else {
            return HoldState::Absent;
        };
        let holder = get(ANN_HOLD_HOLDER).map(str::to_owned);
        match parse_decimal(value) {
            Some(instance) => HoldState::InForce(HoldRecord {
                instance,
                reason: get(ANN_HOLD_REASON).map(str::to_owned),
                placed_at: get(ANN_HOLD_PLACED_AT).map(str::to_owned),
                holder,
            }),
            None => HoldState::Unreadable {
                value: value.to_owned(),
                holder,
            },
        }
    }

    /// Reads a hold from an annotation map (e.g. kube's `ObjectMeta::annotations`).
    pub fn from_annotations(annotations: &std::collections::BTreeMap<String, String>) -> Self {
        HoldState::from_lookup(|k| annotations.get(k).map(String::as_str))
    }

    /// The instance in force, if readable.
    pub fn instance(&self) -> Option<u64> {
        match self {
            HoldState::InForce(r) => Some(r.instance),
            HoldState::Absent | HoldState::Unreadable { .. } => None,
        }
    }

    /// Who placed the hold in force ([`ANN_HOLD_HOLDER`]): `None` when no hold is in force,
    /// or when it was placed before holdfast recorded holders.
    pub fn holder(&self) -> Option<&str> {
        match self {
            HoldState::InForce(r) => r.holder.as_deref(),
            HoldState::Unreadable { holder, .. } => holder.as_deref(),
            HoldState::Absent => None,
        }
    }

    /// Whether any hold (readable or not) is in force.
    pub fn is_held(&self) -> bool {
        !matches!(self, HoldState::Absent)
    }

    /// What a read saw, for comparing one read with the next after a conflict.
    pub fn seen(&self) -> Seen {
        match self {
            HoldState::Absent => Seen::Absent,
            HoldState::InForce(r) => Seen::Instance(r.instance),
            HoldState::Unreadable { .. } => Seen::Unreadable,
        }
    }
}

/// The hold instance one read saw: what "the instance the last read saw" means in the
/// seed's conflict rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Seen {
    Absent,
    Instance(u64),
    Unreadable,
}

/// A strict decimal u64: ASCII digits only (no sign, no spaces).
pub(crate) fn parse_decimal(v: &str) -> Option<u64> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_hold_instance_is_a_hold_of_unknown_instance() {
        let map = [(ANN_HOLD_INSTANCE.to_owned(), "three".to_owned())].into();
        let state = HoldState::from_annotations(&map);
        assert_eq!(
            state,
            HoldState::Unreadable {
                value: "three".into(),
                holder: None
            }
        );
        assert!(state.is_held());
        assert_eq!(state.instance(), None);
        assert_eq!(state.seen(), Seen::Unreadable);
        assert!(!HoldState::Absent.is_held());
    }

    #[test]
    fn the_holder_is_read_with_the_hold_and_only_with_it() {
        let map: std::collections::BTreeMap<String, String> = [
            (ANN_HOLD_INSTANCE.to_owned(), "4".to_owned()),
            (
                ANN_HOLD_HOLDER.to_owned(),
                "system:serviceaccount:a:dispatch".to_owned(),
            ),
        ]
        .into();
        let state = HoldState::from_annotations(&map);
        assert_eq!(state.holder(), Some("system:serviceaccount:a:dispatch"));
        let mut unreadable = map.clone();
        unreadable.insert(ANN_HOLD_INSTANCE.to_owned(), "x".to_owned());
        assert_eq!(
            HoldState::from_annotations(&unreadable).holder(),
            Some("system:serviceaccount:a:dispatch"),
            "an unreadable hold keeps its holder"
        );
        let legacy = [(ANN_HOLD_INSTANCE.to_owned(), "4".to_owned())].into();
        assert_eq!(HoldState::from_annotations(&legacy).holder(), None);
        let leftover = [(ANN_HOLD_HOLDER.to_owned(), "alice".to_owned())].into();
        assert_eq!(
            HoldState::from_annotations(&leftover),
            HoldState::Absent,
            "a holder without a hold is no hold"
        );
    }

    #[test]
    fn decimal_is_strict() {
        assert_eq!(parse_decimal("0"), Some(0));
        assert_eq!(parse_decimal("007"), Some(7));
        assert_eq!(parse_decimal("18446744073709551615"), Some(u64::MAX));
        for bad in ["", "+1", "-0", "1e3", "0x10", "1 "] {
            assert_eq!(parse_decimal(bad), None, "{bad:?}");
        }
    }
}
