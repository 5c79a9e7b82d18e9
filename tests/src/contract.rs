//! Every hold API answer the tests receive is checked against the contract
//! (`holdfast_controller::api::contract`, committed as `api/openapi.json`): the schema of its
//! route, method and status. A small validator of the subset the document uses (`$ref`,
//! `allOf`, `oneOf`, `anyOf`, `type`, `enum`, `properties`, `required`,
//! `additionalProperties`, `propertyNames`, `items`, `minimum`).

use std::sync::OnceLock;

use serde_json::Value;

fn document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| {
        serde_json::from_str(holdfast_controller::api::contract::served())
            .expect("the contract is JSON")
    })
}

/// Panics, naming the route and the first difference, unless `body` is what the contract
/// says `method` on `path` answers with `status`.
pub fn check_answer(method: &str, path: &str, status: u16, body: &Value) {
    if let Err(difference) = answer_matches(method, path, status, body) {
        panic!(
            "the hold API's answer breaks its contract (api/openapi.json): {method} {path} -> {status}: {difference}\nbody: {body}"
        );
    }
}

/// Whether `body` is what the contract says `method` on `path` answers with `status`: the
/// difference, if not.
pub fn answer_matches(method: &str, path: &str, status: u16, body: &Value) -> Result<(), String> {
    let doc = document();
    let path = path.split('?').next().unwrap_or(path);
    let (template, item) = doc["paths"]
        .as_object()
        .and_then(|paths| paths.iter().find(|(t, _)| template_matches(t, path)))
        .ok_or_else(|| format!("no route of the contract matches {path}"))?;
    let operation = item
        .get(method.to_ascii_lowercase())
        .ok_or_else(|| format!("the contract has no {method} on {template}"))?;
    let schema = operation
        .pointer(&format!(
            "/responses/{status}/content/application~1json/schema"
        ))
        .ok_or_else(|| format!("the contract names no {status} answer of {method} {template}"))?;
    validate(doc, schema, body, "$")
}

/// `/v1/nodes/{node}/fence` matches `/v1/nodes/gpu-1/fence`.
fn template_matches(template: &str, path: &str) -> bool {
    let (t, p): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), path.split('/').collect());
    t.len() == p.len()
        && t.iter()
            .zip(&p)
            .all(|(t, p)| (t.starts_with('{') && !p.is_empty()) || t == p)
}

fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> Result<&'a Value, String> {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let pointer = r
                .strip_prefix('#')
                .ok_or_else(|| format!("an external $ref: {r}"))?;
            doc.pointer(pointer)
                .ok_or_else(|| format!("a $ref to nothing: {r}"))
        }
        None => Ok(schema),
    }
}

fn type_matches(name: &str, value: &Value) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => false,
    }
}

/// Checks `value` (at JSON path `at`) against `schema`.
fn validate(doc: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let schema = resolve(doc, schema)?;
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for s in all {
            validate(doc, s, value, at)?;
        }
    }
    if let Some(one) = schema.get("oneOf").and_then(Value::as_array) {
        let results: Vec<Result<(), String>> =
            one.iter().map(|s| validate(doc, s, value, at)).collect();
        let passed = results.iter().filter(|r| r.is_ok()).count();
        if passed != 1 {
            let why: Vec<String> = results.into_iter().filter_map(Result::err).collect();
            return Err(format!(
                "{at}: matches {passed} of the {} oneOf alternatives, not exactly one ({})",
                one.len(),
                why.join("; ")
            ));
        }
    }
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array)
        && !any.iter().any(|s| validate(doc, s, value, at).is_ok())
    {
        return Err(format!("{at}: matches none of the anyOf alternatives"));
    }
    match schema.get("type") {
        Some(Value::String(t)) if !type_matches(t, value) => {
            return Err(format!("{at}: {value} is not of type {t}"));
        }
        Some(Value::Array(ts))
            if !ts
                .iter()
                .filter_map(Value::as_str)
                .any(|t| type_matches(t, value)) =>
        {
            return Err(format!("{at}: {value} is of none of the types {ts:?}"));
        }
        _ => {}
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        return Err(format!("{at}: {value} is not one of {allowed:?}"));
    }
    if let (Some(min), Some(n)) = (
        schema.get("minimum").and_then(Value::as_f64),
        value.as_f64(),
    ) && n < min
    {
        return Err(format!("{at}: {n} is below the minimum {min}"));
    }
    if let Some(items) = value.as_array()
        && let Some(item_schema) = schema.get("items")
    {
        for (i, item) in items.iter().enumerate() {
            validate(doc, item_schema, item, &format!("{at}[{i}]"))?;
        }
    }
    if let Some(object) = value.as_object() {
        let properties = schema.get("properties").and_then(Value::as_object);
        if let Some(required) = schema.get("required").and_then(Value::as_array) {
            for name in required.iter().filter_map(Value::as_str) {
                if !object.contains_key(name) {
                    return Err(format!("{at}: the required field {name} is missing"));
                }
            }
        }
        for (name, field) in object {
            let here = format!("{at}.{name}");
            if let Some(names) = schema.get("propertyNames") {
                validate(doc, names, &Value::String(name.clone()), &here)?;
            }
            match (
                properties.and_then(|p| p.get(name)),
                schema.get("additionalProperties"),
            ) {
                (Some(s), _) => validate(doc, s, field, &here)?,
                (None, Some(Value::Bool(false))) => {
                    return Err(format!("{here}: a field the contract does not allow"));
                }
                (None, Some(s)) if s.is_object() => validate(doc, s, field, &here)?,
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const STATUS: &str = "/v1/namespaces/team-a/trainjobs/mnist/status";

    #[test]
    fn an_answer_is_checked_against_its_route_and_status() {
        let ok = json!({"result": "Ok", "mode": "kueue", "heldObject": "Workload", "hold": null,
                        "opened": true, "attempt": 1,
                        "state": {"kind": "Pending", "waitingFor": "Workload"},
                        "remainingPods": []});
        answer_matches("GET", STATUS, 200, &ok).expect("a status");
        let wrong = json!({"result": "Ok", "mode": "kueue", "heldObject": "Workload", "hold": null,
                           "opened": "yes", "attempt": 1, "state": {"kind": "Running"}});
        let e = answer_matches("GET", STATUS, 200, &wrong).expect_err("opened is a boolean");
        assert!(e.contains("$.opened"), "{e}");
        let unknown_state = json!({"result": "Ok", "mode": "plain", "heldObject": "TrainJob",
                                   "opened": true, "attempt": 1, "state": {"kind": "Sleeping"}});
        assert!(answer_matches("GET", STATUS, 200, &unknown_state).is_err());
        let refusal = json!({"error": "Unauthenticated", "message": "no token"});
        answer_matches("GET", STATUS, 401, &refusal).expect("a refusal");
        let e = answer_matches("GET", STATUS, 418, &refusal).expect_err("no 418");
        assert!(e.contains("418"), "{e}");
        let e = answer_matches("GET", "/v1/nowhere", 200, &refusal).expect_err("no route");
        assert!(e.contains("/v1/nowhere"), "{e}");
        let call = json!({"result": "Ok", "outcome": "Released", "resumed": true});
        answer_matches(
            "POST",
            "/v1/namespaces/team-a/trainjobs/mnist/release",
            200,
            &call,
        )
        .expect("a release");
        let no_outcome = json!({"result": "Ok", "outcome": "Slept"});
        assert!(
            answer_matches(
                "POST",
                "/v1/namespaces/team-a/trainjobs/mnist/hold",
                200,
                &no_outcome
            )
            .is_err()
        );
    }
}
