//! Reading an AdmissionReview while keeping only what the policy reads.
//!
//! A typical review carries two whole objects, managedFields included, and building a
//! `serde_json::Value` node for each of their members is most of an admission's cost. The
//! reader here parses the same bytes with the same parser but builds values only for the
//! members a [`Shape`] names; every other member is checked as JSON and dropped without
//! allocating. Whatever is kept is exactly what `serde_json::Value` would have built (same
//! numbers, same duplicate-key rule: the last one wins), and a member kept with a non-object
//! value is kept whole, so a type error reads the same as before.
//!
//! What is kept of an object (`request.object`, `request.oldObject`) is the field list the
//! rules read through, `policy::object::FIELDS`: no second list to keep in step. `policy_fuzz`
//! also checks that every decision on pruned input equals the one on the whole input.

use crate::policy::object::FIELDS;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::borrow::Cow;
use std::fmt;

/// Which members of a JSON value to keep.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Shape {
    /// The whole value.
    All,
    /// If the value is an object, only these members (each with its own shape); any other
    /// value whole.
    Only(&'static [(&'static str, Shape)]),
    /// Within an object the policy reads: if the value is an object, only the members on the
    /// paths of [`FIELDS`] that start with this prefix (the object itself: `&[]`); any other
    /// value whole.
    Fields(&'static [&'static str]),
}

use Shape::{All, Fields, Only};

/// An object as the policy reads it: the members on the paths of [`FIELDS`].
pub(super) const OBJECT: Shape = Fields(&[]);

impl Shape {
    /// The shape member `key` is kept with, if it is kept.
    fn member(self, key: &str) -> Option<Shape> {
        match self {
            All => Some(All),
            Only(keep) => keep.iter().find(|(name, _)| *name == key).map(|(_, s)| *s),
            Fields(prefix) => {
                let depth = prefix.len();
                let mut kept = None;
                for path in FIELDS.iter().map(|f| f.path()) {
                    if path.get(depth).is_some_and(|m| *m == key) && path.starts_with(prefix) {
                        // No listed path lies inside another (a unit test of the list).
                        if path.len() == depth + 1 {
                            return Some(All);
                        }
                        kept = Some(Fields(&path[..=depth]));
                    }
                }
                kept
            }
        }
    }
}

/// The members of an AdmissionReview that `decode_review` reads or checks.
pub(crate) const REVIEW: Shape = Only(&[
    ("apiVersion", All),
    ("kind", All),
    (
        "request",
        Only(&[
            ("uid", All),
            // Checked to be an object, never read.
            ("kind", Only(&[])),
            ("resource", Only(&[("group", All), ("resource", All)])),
            ("subResource", All),
            ("name", All),
            ("namespace", All),
            ("operation", All),
            ("userInfo", Only(&[("username", All), ("groups", All)])),
            ("object", OBJECT),
            ("oldObject", OBJECT),
            ("dryRun", All),
        ]),
    ),
]);

/// Parses `text` as JSON, keeping what `shape` names.
pub(crate) fn parse(text: &str, shape: Shape) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = shape.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// Keeps only the members `shape` names from an already parsed value (the same cut
/// [`parse`] makes while reading).
pub(crate) fn prune_value(value: &Value, shape: Shape) -> Value {
    match (shape, value) {
        (All, _) => value.clone(),
        (_, Value::Object(map)) => Value::Object(
            map.iter()
                .filter_map(|(k, v)| shape.member(k).map(|s| (k.clone(), prune_value(v, s))))
                .collect(),
        ),
        _ => value.clone(),
    }
}

/// An object as `decode_review` hands it to the policy.
pub fn prune_object(value: &Value) -> Value {
    prune_value(value, OBJECT)
}

impl<'de> DeserializeSeed<'de> for Shape {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        match self {
            All => serde::Deserialize::deserialize(d),
            shape => d.deserialize_any(Pruning(shape)),
        }
    }
}

/// Builds a value as `serde_json::Value` does, except that an object keeps only the members
/// its shape names.
struct Pruning(Shape);

impl<'de> Visitor<'de> for Pruning {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        serde::Deserialize::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(v) = seq.next_element::<Value>()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            match self.0.member(&key) {
                Some(shape) => {
                    let v = map.next_value_seed(shape)?;
                    out.insert(key.into_owned(), v);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(out))
    }
}

/// A JSON string (a member name or value), borrowed from the input when it has no escapes.
pub(super) struct Text<'de>(pub(super) Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Text<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }

            fn visit_str<E>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }

            fn visit_string<E>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(TextVisitor)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    const SHAPE: Shape = Only(&[("a", All), ("b", Only(&[("c", All)]))]);

    #[test]
    fn keeps_only_the_named_members_at_any_depth() {
        let text = r#"{"a": [1, -2, 2.5, "x", null, {"deep": true}], "b": {"c": {"z": 1}, "d": [1, 2]}, "e": {"f": "g"}}"#;
        let kept = parse(text, SHAPE).unwrap();
        assert_eq!(
            kept,
            json!({"a": [1, -2, 2.5, "x", null, {"deep": true}], "b": {"c": {"z": 1}}})
        );
        let whole: Value = serde_json::from_str(text).unwrap();
        assert_eq!(prune_value(&whole, SHAPE), kept);
    }

    #[test]
    fn a_kept_member_that_is_not_an_object_is_kept_whole() {
        for b in [json!([{"c": 1, "d": 2}]), json!("s"), json!(7), json!(null)] {
            let text = json!({"b": b.clone()}).to_string();
            assert_eq!(parse(&text, SHAPE).unwrap(), json!({"b": b}));
        }
    }

    #[test]
    fn the_last_of_duplicate_members_wins_as_in_serde_json() {
        let text = r#"{"a": 1, "a": 2, "e": 3, "e": {"x": 4}}"#;
        let whole: Value = serde_json::from_str(text).unwrap();
        assert_eq!(parse(text, SHAPE).unwrap(), prune_value(&whole, SHAPE));
        assert_eq!(parse(text, SHAPE).unwrap(), json!({"a": 2}));
    }

    #[test]
    fn escaped_member_names_are_matched_after_unescaping() {
        assert_eq!(
            parse(r#"{"\u0061": 1, "b\u0000": 2}"#, SHAPE).unwrap(),
            json!({"a": 1})
        );
    }

    #[test]
    fn an_object_keeps_exactly_the_listed_fields() {
        let whole = json!({
            "apiVersion": "v1",
            "metadata": {"name": "n", "uid": "u", "namespace": "ns", "labels": {"a": "b"},
                "managedFields": [{"manager": "m"}]},
            "spec": {"suspend": true, "queueName": "q", "runtimeRef": {"name": "r", "x": 1},
                "template": {}},
            "data": {"k": "v"},
            "status": {},
        });
        let kept = json!({
            "metadata": {"name": "n", "uid": "u", "labels": {"a": "b"}},
            "spec": {"suspend": true, "queueName": "q", "runtimeRef": {"name": "r", "x": 1}},
            "data": {"k": "v"},
        });
        assert_eq!(prune_value(&whole, OBJECT), kept);
        assert_eq!(parse(&whole.to_string(), OBJECT).unwrap(), kept);
        // Every listed field survives, whatever its value.
        for field in FIELDS {
            let mut v = json!("x");
            for member in field.path().iter().rev() {
                v = json!({ *member: v });
            }
            assert_eq!(prune_value(&v, OBJECT), v, "{field}");
        }
        // A parent that is not an object is kept whole, so a type error reads the same.
        let odd = json!({"metadata": [1], "spec": "s"});
        assert_eq!(prune_value(&odd, OBJECT), odd);
    }

    #[test]
    fn dropped_members_must_still_be_json() {
        for bad in [
            r#"{"e": [1, }"#,
            r#"{"e": tru}"#,
            r#"{"e": "unterminated}"#,
            r#"{"a": 1} trailing"#,
            r#"{"e": "\x"}"#,
        ] {
            assert!(parse(bad, SHAPE).is_err(), "{bad}");
        }
    }

    #[test]
    fn deep_nesting_is_an_error_where_kept_and_read_without_recursion_where_dropped() {
        let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(parse(&format!(r#"{{"a": {}}}"#, nest(10_000)), SHAPE).is_err());
        // serde_json skips a dropped member with a loop, not recursion: no stack to exhaust.
        assert!(parse(&format!(r#"{{"e": {}}}"#, nest(1_000_000)), SHAPE).is_ok());
    }
}
