//! The fast way to read a well-formed AdmissionReview: straight into typed slots, strings
//! borrowed from the body, no map built for the envelope.
//!
//! It reads the same members as `decode_review`'s general path and applies the same checks,
//! but it gives up ([`None`]) at the first thing it does not like (a wrong type, a bad
//! operation, a missing member) instead of explaining it: `decode_review` then reads the body
//! again the general way, which names the problem. So an answer from here is always the one
//! the general path gives; the unit tests check that on arbitrary reviews.

use super::super::{AdmissionInput, Operation, Resource, UserInfo};
use super::pruned::{OBJECT, Text};
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

/// The only AdmissionReview version served (the apiserver sends the first version listed in
/// the webhook's `admissionReviewVersions`; the chart lists only v1).
pub const API_VERSION: &str = "admission.k8s.io/v1";
pub const KIND: &str = "AdmissionReview";

/// `request.uid` and the policy's input, if `text` is a well-formed AdmissionReview v1.
pub(super) fn decode(text: &str) -> Option<(String, AdmissionInput)> {
    let mut de = serde_json::Deserializer::from_str(text);
    let Record(review) = Record::<Review<'_>>::deserialize(&mut de).ok()?;
    de.end().ok()?;
    if review.api_version?.0 != API_VERSION || review.kind?.0 != KIND {
        return None;
    }
    let request = review.request?.0;
    let uid = request.uid?.0;
    let resource = request.resource?.0;
    let plural = resource.resource?.0;
    let user = request.user_info?.0;
    if uid.is_empty() || plural.is_empty() {
        return None;
    }
    let group = resource.group.map(|t| t.0);
    let input = AdmissionInput {
        operation: Operation::from_admission(&request.operation?.0)?,
        resource: Resource::from_group_resource(group.as_deref().unwrap_or(""), &plural),
        subresource: nonempty(request.sub_resource),
        name: request.name.map(|t| t.0.into_owned()).unwrap_or_default(),
        namespace: nonempty(request.namespace),
        user: UserInfo {
            username: user.username.map(|t| t.0.into_owned()).unwrap_or_default(),
            groups: user
                .groups
                .unwrap_or_default()
                .into_iter()
                .map(|t| t.0.into_owned())
                .collect(),
        },
        object: request.object.and_then(|o| o.0),
        old_object: request.old_object.and_then(|o| o.0),
        dry_run: request.dry_run.unwrap_or(false),
    };
    Some((uid.into_owned(), input))
}

/// An optional string member, `""` read as absent.
fn nonempty(t: Option<Text<'_>>) -> Option<String> {
    t.map(|t| t.0)
        .filter(|s| !s.is_empty())
        .map(Cow::into_owned)
}

#[derive(Default)]
struct Review<'de> {
    api_version: Option<Text<'de>>,
    kind: Option<Text<'de>>,
    request: Option<Record<Request<'de>>>,
}

#[derive(Default)]
struct Request<'de> {
    uid: Option<Text<'de>>,
    resource: Option<Record<GroupResource<'de>>>,
    sub_resource: Option<Text<'de>>,
    name: Option<Text<'de>>,
    namespace: Option<Text<'de>>,
    operation: Option<Text<'de>>,
    user_info: Option<Record<User<'de>>>,
    object: Option<Object>,
    old_object: Option<Object>,
    dry_run: Option<bool>,
}

#[derive(Default)]
struct GroupResource<'de> {
    group: Option<Text<'de>>,
    resource: Option<Text<'de>>,
}

#[derive(Default)]
struct User<'de> {
    username: Option<Text<'de>>,
    groups: Option<Vec<Text<'de>>>,
}

/// A JSON object whose members fill a struct; anything but an object is an error (serde's
/// derived structs would also take an array).
trait Members<'de>: Default {
    /// Reads the value of member `key`; a member read twice keeps the last value, as a JSON
    /// object parsed into a map does.
    fn member<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
}

fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<IgnoredAny>().map(|_| ())
}

impl<'de> Members<'de> for Review<'de> {
    fn member<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "apiVersion" => self.api_version = map.next_value()?,
            "kind" => self.kind = map.next_value()?,
            "request" => self.request = map.next_value()?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

impl<'de> Members<'de> for Request<'de> {
    fn member<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "uid" => self.uid = map.next_value()?,
            // Checked to be an object (or null), never read.
            "kind" => {
                map.next_value::<Option<Record<Ignored>>>()?;
            }
            "resource" => self.resource = map.next_value()?,
            "subResource" => self.sub_resource = map.next_value()?,
            "name" => self.name = map.next_value()?,
            "namespace" => self.namespace = map.next_value()?,
            "operation" => self.operation = map.next_value()?,
            "userInfo" => self.user_info = map.next_value()?,
            "object" => self.object = Some(map.next_value()?),
            "oldObject" => self.old_object = Some(map.next_value()?),
            "dryRun" => self.dry_run = map.next_value()?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

impl<'de> Members<'de> for GroupResource<'de> {
    fn member<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "group" => self.group = map.next_value()?,
            "resource" => self.resource = map.next_value()?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

impl<'de> Members<'de> for User<'de> {
    fn member<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "username" => self.username = map.next_value()?,
            "groups" => self.groups = map.next_value()?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// Any object, members unread.
#[derive(Default)]
struct Ignored;

impl<'de> Members<'de> for Ignored {
    fn member<A: MapAccess<'de>>(&mut self, _: &str, map: &mut A) -> Result<(), A::Error> {
        skip(map)
    }
}

/// A struct read from a JSON object by its [`Members`].
struct Record<T>(T);

impl<'de, T: Members<'de>> Deserialize<'de> for Record<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct RecordVisitor<T>(PhantomData<T>);
        impl<'de, T: Members<'de>> Visitor<'de> for RecordVisitor<T> {
            type Value = Record<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Record<T>, A::Error> {
                let mut out = T::default();
                while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
                    out.member(&key, &mut map)?;
                }
                Ok(Record(out))
            }
        }
        d.deserialize_map(RecordVisitor(PhantomData))
    }
}

/// `object`/`oldObject`: `null` is absent, anything else is kept as the policy reads it.
struct Object(Option<Value>);

impl<'de> Deserialize<'de> for Object {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v: Value = OBJECT.deserialize(d)?;
        Ok(Object(Some(v).filter(|v| !v.is_null())))
    }
}
