//! The CEL half of every rule against its Rust half, in seconds: each request of the Rust
//! rules' case table (`validate/tests.rs`), as every identity in each mode, is judged by
//! [`validate`] and by the rendered CEL (match conditions, variables and validations, in the
//! apiserver's order) through a CEL interpreter; the rule that refuses must be the same.
//! The apiserver (`tests/tests/it/validation_engines.rs`) remains the final word on what its
//! own CEL environment makes of the same text.
#![allow(clippy::unwrap_used)]

use super::conditions::conditions;
use super::{Modes, Policy, Rule, Validation, unheld_in_plain_mode, validations, variables};
use crate::mode::Mode;
use crate::policy::testkit::{CONTROLLER, EVERYONE, GC, KUEUE, NS, TRAINER, who};
use crate::policy::validate::tests::table;
use crate::policy::{AdmissionInput, Operation, Resource, validate};
use cel::{Context, Program, Value as Cel};
use serde_json::{Value, json};
use std::collections::HashMap;

/// What the CEL engine decided.
#[derive(Debug, PartialEq)]
enum Engine {
    /// The policy does not match the request (kind, operation, subresource or a condition).
    Skipped,
    Allowed,
    Refused(Rule),
    /// An expression failed: with `failurePolicy: Fail` the apiserver refuses.
    Failed(String),
}

fn list(users: &[&str]) -> String {
    let quoted: Vec<String> = users.iter().map(|u| format!("'{u}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// The chart's placeholders as the test identities (`testkit::who`) render them.
fn render(text: &str, mode: Mode) -> String {
    let unheld = if mode == Mode::Plain {
        unheld_in_plain_mode()
    } else {
        String::new()
    };
    [
        ("{{ $controllers }}", list(&[CONTROLLER])),
        ("{{ $kueueUsers }}", list(&[KUEUE])),
        ("{{ $kueue }}", list(&[KUEUE])),
        ("{{ $deletersProper }}", list(&[GC, NS])),
        ("{{ $creators }}", list(&[CONTROLLER, TRAINER])),
        ("{{ $deleters }}", list(&[CONTROLLER, GC, NS])),
        ("{{ $ctlDesc }}", "the holdfast controller".to_owned()),
        ("{{ $kueueDesc }}", "Kueue".to_owned()),
        ("{{ $creatorsDesc }}", "the creators".to_owned()),
        ("{{ $deletersDesc }}", "the deleters".to_owned()),
        ("{{ $unheldInPlainMode }}", unheld),
    ]
    .iter()
    .fold(text.to_owned(), |t, (k, v)| t.replace(k, v))
}

fn in_mode(modes: Modes, mode: Mode) -> bool {
    match modes {
        Modes::Both => true,
        Modes::Plain => mode == Mode::Plain,
        Modes::Kueue => mode == Mode::Kueue,
    }
}

/// The policy that judges `i`, as the chart's match constraints say.
fn policy_of(i: &AdmissionInput) -> Option<Policy> {
    if i.subresource.is_some() {
        return None;
    }
    match (&i.resource, i.operation) {
        (Resource::ConfigMap, Operation::Create | Operation::Update | Operation::Delete) => {
            Some(Policy::Snapshots)
        }
        (Resource::TrainJob, Operation::Create | Operation::Update) => Some(Policy::TrainJobs),
        (Resource::Workload, Operation::Create | Operation::Update) => Some(Policy::Workloads),
        _ => None,
    }
}

/// Whether an apiserver could send `i` to a policy: the objects its operation carries are JSON
/// objects. The webhook's [`Rule::Malformed`] answers the rest, which only a broken or hostile
/// caller of the webhook's endpoint sends; CEL never sees them.
fn sent_by_an_apiserver(i: &AdmissionInput) -> bool {
    let is_object = |v: &Option<Value>| v.as_ref().is_some_and(Value::is_object);
    match i.operation {
        Operation::Create => is_object(&i.object),
        Operation::Update => is_object(&i.object) && is_object(&i.old_object),
        Operation::Delete => is_object(&i.old_object),
        Operation::Connect => true,
    }
}

/// Each text compiled once per mode, as the chart renders it there.
#[derive(Default)]
struct Programs(HashMap<(bool, String), Program>);

impl Programs {
    fn eval(&mut self, text: &str, mode: Mode, ctx: &Context<'_, '_>) -> Result<Cel, String> {
        let program = self
            .0
            .entry((mode == Mode::Plain, text.to_owned()))
            .or_insert_with(|| {
                let text = render(text, mode);
                Program::compile(&text)
                    .unwrap_or_else(|e| panic!("CEL does not parse: {e}\n{text}"))
            });
        program.execute(ctx).map_err(|e| format!("{e}"))
    }
}

/// The rows and their programs.
struct Compiled {
    rows: Vec<Validation>,
    programs: Programs,
}

impl Compiled {
    fn judge(&mut self, i: &AdmissionInput, mode: Mode) -> (Engine, Option<String>) {
        let Some(policy) = policy_of(i) else {
            return (Engine::Skipped, None);
        };
        let resource = match policy {
            Policy::Snapshots => "configmaps",
            Policy::TrainJobs => "trainjobs",
            Policy::Workloads => "workloads",
        };
        let request = json!({
            "operation": i.operation.to_string(),
            "name": i.name,
            "namespace": i.namespace,
            "userInfo": {"username": i.user.username},
            "resource": {"resource": resource},
        });
        let mut ctx = Context::default();
        ctx.add_variable("request", request).unwrap();
        ctx.add_variable("object", i.object.clone().unwrap_or(Value::Null))
            .unwrap();
        ctx.add_variable("oldObject", i.old_object.clone().unwrap_or(Value::Null))
            .unwrap();
        for c in conditions(policy).iter().filter(|c| in_mode(c.modes, mode)) {
            match self.programs.eval(&c.expression, mode, &ctx) {
                Ok(Cel::Bool(true)) => {}
                Ok(Cel::Bool(false)) => return (Engine::Skipped, None),
                other => {
                    return (
                        Engine::Failed(format!("condition {}: {other:?}", c.name)),
                        None,
                    );
                }
            }
        }
        // Variables are lazy in the apiserver: one that fails fails only the rules reading it.
        let mut vars: HashMap<String, Cel> = HashMap::new();
        for v in variables(policy) {
            ctx.add_variable_from_value("variables", vars.clone());
            if let Ok(value) = self.programs.eval(&v.expression, mode, &ctx) {
                vars.insert(v.name.to_owned(), value);
            }
        }
        ctx.add_variable_from_value("variables", vars);
        for r in self
            .rows
            .iter()
            .filter(|r| r.policy == policy && in_mode(r.modes, mode))
        {
            match self.programs.eval(&r.expression, mode, &ctx) {
                Ok(Cel::Bool(true)) => {}
                Ok(Cel::Bool(false)) => {
                    let message = match self.programs.eval(&r.message, mode, &ctx) {
                        Ok(Cel::String(s)) => s.to_string(),
                        other => format!("<message failed: {other:?}>"),
                    };
                    return (Engine::Refused(r.rule), Some(message));
                }
                other => return (Engine::Failed(format!("rule {}: {other:?}", r.rule)), None),
            }
        }
        (Engine::Allowed, None)
    }
}

#[test]
fn the_cel_rules_refuse_by_the_same_rule_as_the_rust_rules_on_every_case() {
    let who = who();
    let mut engine = Compiled {
        rows: validations(),
        programs: Programs::default(),
    };
    let mut failures = Vec::new();
    let mut compared = 0;
    let mut refused = std::collections::BTreeSet::new();
    // Every case in both modes, whatever modes it was written for: the two halves must agree
    // on every request, not only where the case's verdict is asserted.
    for c in table() {
        for mode in [Mode::Plain, Mode::Kueue] {
            for user in EVERYONE {
                let i = c.input(user);
                if !sent_by_an_apiserver(&i) {
                    continue;
                }
                let rust = validate(&i, &who, mode).rule();
                let (cel, message) = engine.judge(&i, mode);
                compared += 1;
                let agree = match (&rust, &cel) {
                    (None, Engine::Skipped | Engine::Allowed) => true,
                    (Some(r), Engine::Refused(s)) => r == s,
                    _ => false,
                };
                if let (Engine::Refused(r), Some(p)) = (&cel, policy_of(&i)) {
                    refused.insert((p.suffix(), *r, mode.to_string()));
                }
                if !agree {
                    failures.push(format!(
                        "{} [{mode}] as {user}: Rust {rust:?}, CEL {cel:?}",
                        c.name
                    ));
                }
                if let (Engine::Refused(r), Some(m)) = (&cel, &message)
                    && !(m.ends_with(&r.tag()) && m.contains(user))
                {
                    failures.push(format!(
                        "{} [{mode}] as {user}: the CEL message of {r} must name the user and end with its tag: {m}",
                        c.name
                    ));
                }
            }
        }
    }
    eprintln!("{compared} requests compared");
    assert!(compared >= 800, "the table ran only {compared} comparisons");
    assert!(
        failures.is_empty(),
        "{} of {compared} disagree:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Every row is exercised by the table, in its policy and in each of its modes.
    let missing: Vec<String> = validations()
        .iter()
        .flat_map(|r| {
            [Mode::Plain, Mode::Kueue]
                .into_iter()
                .filter(|&m| in_mode(r.modes, m))
                .map(|m| (r.policy.suffix(), r.rule, m.to_string()))
        })
        .filter(|row| !refused.contains(row))
        .map(|(p, r, m)| format!("{r} ({p}, {m} mode)"))
        .collect();
    assert!(
        missing.is_empty(),
        "the case table refuses by none of {missing:?}"
    );
}
