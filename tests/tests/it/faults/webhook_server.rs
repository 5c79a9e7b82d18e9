//! Fault tests of the admission webhook: the real `holdfast-webhook` binary, called by the
//! real apiserver (registered by URL with the chart's webhook configurations,
//! `holdfast_tests::registration`, whose protected entries use `failurePolicy: Fail`), under load from real clients acting as a plain user.
//!
//! What is injected:
//!
//! * **Overload.** One replica runs with `--max-concurrent=1` while 48 concurrent writers
//!   edit a snapshot ConfigMap's data and a held TrainJob's hold annotation (both protected)
//!   and create and edit ordinary ConfigMaps. Twice: with the chart's `timeoutSeconds: 5`,
//!   and with `timeoutSeconds: 1`.
//! * **Loss of a replica.** Two replicas serve behind a TCP load balancer in the test (each
//!   connection to one replica, round robin, skipping a replica that refuses the connection,
//!   as a Service whose endpoint disappears); under the same kind of load the replica
//!   carrying the traffic is killed with SIGKILL.
//!
//! What is checked, by counting every outcome (timeouts only bound the waiting):
//!
//! * no protected edit is ever allowed: each is refused either by the webhook's own denial or
//!   by the apiserver applying `failurePolicy: Fail` to a failed call; the objects read back
//!   unchanged, and the audit log holds one refused event per edit sent and no successful one;
//! * every unrelated ConfigMap write succeeds: `matchConditions` keep them away from the
//!   webhook (it answers no ConfigMap CREATE meanwhile), so they do not depend on it;
//! * overload: the webhook sheds (its `/metrics` counts `overloaded` request errors), and a
//!   shed request is answered `503` with `Retry-After: 1` and a Status saying why (seen by
//!   sending reviews to it directly). The apiserver honours that `Retry-After`: it calls
//!   again after a second, within the webhook's `timeoutSeconds`. So with the chart's 5 s the
//!   clients get the webhook's own denial; with 1 s the retry cannot fit, the call fails, and
//!   the client gets the apiserver's refusal naming the webhook ("failed calling webhook
//!   ...: context deadline exceeded"), never the shed message itself;
//! * loss of a replica: edits in flight on the killed replica are refused by the failure
//!   policy, and after the kill the survivor goes on answering: protected edits sent after
//!   the kill are denied by the webhook itself, with its message, and the survivor's metrics
//!   count those denials.
//!
//! Each test owns its control plane, and they run one at a time (as in the rest of `faults`). The
//! webhook binary must be built first (`cargo build -p holdfast-webhook`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::metric;
use holdfast_tests::holdfast::{
    WebhookReplica, owned_control_plane, register_webhook as register, serving_cert,
};
use holdfast_tests::registration::DEFAULT_TIMEOUT_SECONDS;
use holdfast_tests::wait::wait_for;
use holdfast_tests::{ControlPlane, Identity};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The protected snapshot ConfigMap (created by the controller).
const SNAPSHOT: &str = "mnist-runtime-snapshot";
/// The protected held TrainJob (held by the controller).
const HELD: &str = "held";
const HOLD: &str = "holdfast.dev/hold-instance";
const HOLD_REASON: &str = "holdfast.dev/hold-reason";
const SNAPSHOT_DATA: &str =
    "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\n";

// ---------------------------------------------------------------------------------------
// The promises
// ---------------------------------------------------------------------------------------

/// With the chart's `timeoutSeconds: 5` the apiserver honours a shed call's `Retry-After: 1`
/// and calls again within its budget, so the clients mostly get the webhook's own denial.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overloaded_webhook_sheds_yet_every_protected_edit_is_refused_and_unrelated_writes_succeed()
{
    let _one = super::ONE_AT_A_TIME.lock().await;
    let started = Instant::now();
    let run = Overload::run("faults-overload", DEFAULT_TIMEOUT_SECONDS, &[], false).await;
    // Without a retry each shed call would fail its own write (a write's calls stop at its
    // first failed one), so more shed calls than writes refused by the failure policy means
    // the apiserver called again after a shed call.
    let failed = run
        .tally
        .count(None, PROTECTED, Outcome::RefusedByFailurePolicy);
    assert!(
        (failed as f64) < run.shed,
        "{} shed calls, {failed} writes refused by the failure policy: no shed call was retried",
        run.shed
    );

    // The shed answer itself, seen directly: 503, Retry-After: 1, a Status saying why.
    let (answered, shed, sample) = shed_directly(&run.cp, run.replica.port, &run.ns).await;
    println!("direct burst: {answered} answered, {shed} shed; a shed answer: {sample}");
    assert!(shed > 0, "no direct request was shed");
    assert!(
        sample.starts_with("503 Retry-After: 1 ")
            && sample.contains("\"reason\":\"ServiceUnavailable\"")
            && sample.contains("is answering 1 admissions already; this one is shed"),
        "{sample}"
    );
    run.finish();
    println!("took {:?}", started.elapsed());
}

/// With a `timeoutSeconds` (1) too short for the apiserver's retry after `Retry-After: 1`,
/// a shed call is a failed call: `failurePolicy: Fail` refuses the write, and the client is
/// told the webhook call failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overloaded_webhook_past_its_timeout_is_failed_closed_and_the_client_is_told_so() {
    let _one = super::ONE_AT_A_TIME.lock().await;
    let started = Instant::now();
    let run = Overload::run(
        "faults-overload-short",
        1,
        // Below the registration's timeoutSeconds, as the flag asks.
        &["--request-timeout=800ms"],
        true,
    )
    .await;
    let refused = run
        .tally
        .count(None, PROTECTED, Outcome::RefusedByFailurePolicy);
    assert!(
        refused > 0,
        "no protected edit was refused by the failure policy"
    );
    // Every such refusal names one of holdfast's webhooks as failing (see `outcome`).
    let messages = run.tally.messages(Outcome::RefusedByFailurePolicy);
    assert!(
        messages.iter().all(|m| m
            .starts_with("500 InternalError: Internal error occurred: failed calling webhook \"")),
        "{messages:#?}"
    );
    run.finish();
    println!("took {:?}", started.elapsed());
}

/// Two replicas behind the test's load balancer; under load the one carrying the traffic is
/// killed with SIGKILL. Edits in flight on it fail closed; the survivor takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_one_of_two_replicas_under_load_never_lets_a_protected_edit_through() {
    const WRITERS: usize = 24;
    const MIN_BEFORE: usize = 60;
    const MIN_AFTER: usize = 60;
    let _one = super::ONE_AT_A_TIME.lock().await;
    let started = Instant::now();
    let cp = owned_control_plane().await;
    let ns = cp.namespace("faults-replica").await.expect("namespace");
    let (cert, key) = serving_cert(&cp, "replicas");
    let mut replicas = vec![
        WebhookReplica::start(&cp, "replica-a", &cert, &key, &[]),
        WebhookReplica::start(&cp, "replica-b", &cert, &key, &[]),
    ];
    for r in &mut replicas {
        r.wait_ready().await;
    }
    let lb = Balancer::start(replicas.iter().map(WebhookReplica::addr).collect()).await;
    register(&cp, &ns, lb.port, DEFAULT_TIMEOUT_SECONDS).await;
    let objects = Objects::create(&cp, &ns).await;

    let load = Load::start(&cp, &ns, WRITERS).await;
    wait_for(
        "protected edits denied by the webhook before the kill",
        Duration::from_secs(120),
        || async {
            let denied =
                load.tally
                    .count(Some(Phase::BeforeKill), PROTECTED, Outcome::DeniedByWebhook);
            (denied >= MIN_BEFORE).then_some(())
        },
    )
    .await;

    // Kill the replica that has answered the most (the one the apiserver's connections go
    // to), so in-flight admissions are cut and new connections meet a refused port.
    let mut answered = Vec::new();
    for r in &replicas {
        answered.push(metric(&r.metrics().await, ADMISSIONS, &[]));
    }
    let victim = usize::from(answered[1] > answered[0]);
    let survivor = 1 - victim;
    println!(
        "reviews answered before the kill: {} {}, {} {}; killing {} with SIGKILL",
        replicas[0].proc.name,
        answered[0],
        replicas[1].proc.name,
        answered[1],
        replicas[victim].proc.name
    );
    let survivor_before = replicas[survivor].metrics().await;
    replicas[victim].proc.kill();
    // The writes the writers start from now on are sent after the replica is gone.
    load.killed.store(true, Ordering::SeqCst);

    wait_for(
        "the surviving replica to deny protected edits after the kill",
        Duration::from_secs(120),
        || async {
            let denied =
                load.tally
                    .count(Some(Phase::AfterKill), PROTECTED, Outcome::DeniedByWebhook);
            let unrelated = load
                .tally
                .count(Some(Phase::AfterKill), UNRELATED, Outcome::Allowed);
            (denied >= MIN_AFTER && unrelated >= MIN_AFTER).then_some(())
        },
    )
    .await;
    let tally = load.stop().await;
    let survivor_after = replicas[survivor].metrics().await;
    println!("{}", tally.report());
    println!("load balancer: {}", lb.report());

    tally.assert_no_protected_edit_allowed_and_every_unrelated_write_succeeded();
    // After the kill the survivor answered: denials of edits sent after the kill can only be
    // its own, and its metrics count at least as many.
    let denied_after = tally.count(Some(Phase::AfterKill), PROTECTED, Outcome::DeniedByWebhook);
    assert!(denied_after >= MIN_AFTER, "{denied_after}");
    let denied = |m: &str| {
        metric(
            m,
            ADMISSIONS,
            &[("endpoint", "validate"), ("verdict", "denied")],
        )
    };
    let survivor_denied = denied(&survivor_after) - denied(&survivor_before);
    println!(
        "{} denied {survivor_denied} admissions after the kill",
        replicas[survivor].proc.name
    );
    assert!(
        survivor_denied >= denied_after as f64,
        "the survivor's metrics count {survivor_denied} denials, the clients saw {denied_after}"
    );
    assert!(
        replicas[survivor].proc.running(),
        "the surviving replica exited:\n{}",
        replicas[survivor].proc.log_tail(30)
    );
    objects.assert_unchanged(&cp, &ns).await;
    assert_audit_shows_no_protected_edit(&cp, &ns, tally.protected(None)).await;
    lb.stop();
    drop(replicas);
    cp.stop();
    println!("took {:?}", started.elapsed());
}

/// One overload run: a single replica with `--max-concurrent=1`, registered with
/// `timeout_seconds`, under [`OVERLOAD_WRITERS`] concurrent writers until it has shed (and,
/// with `want_failure_policy`, until a protected edit was refused by the failure policy) and
/// [`MIN_PROTECTED`] protected edits were tried. Checks what holds in every case.
struct Overload {
    cp: ControlPlane,
    ns: String,
    replica: WebhookReplica,
    tally: Arc<Tally>,
    /// Admission calls the webhook shed during the load.
    shed: f64,
}

const OVERLOAD_WRITERS: usize = 48;
const MIN_PROTECTED: usize = 300;

impl Overload {
    async fn run(
        prefix: &str,
        timeout_seconds: i32,
        extra: &[&str],
        want_failure_policy: bool,
    ) -> Overload {
        let cp = owned_control_plane().await;
        let ns = cp.namespace(prefix).await.expect("namespace");
        let (cert, key) = serving_cert(&cp, prefix);
        let mut args = vec!["--max-concurrent=1"];
        args.extend_from_slice(extra);
        let mut replica = WebhookReplica::start(&cp, prefix, &cert, &key, &args);
        replica.wait_ready().await;
        register(&cp, &ns, replica.port, timeout_seconds).await;
        let objects = Objects::create(&cp, &ns).await;

        let before = replica.metrics().await;
        let load = Load::start(&cp, &ns, OVERLOAD_WRITERS).await;
        wait_for(
            "the webhook to shed under load",
            Duration::from_secs(240),
            || async {
                let shed = metric(&replica.metrics().await, SHED.0, &[SHED.1]);
                let failed = load
                    .tally
                    .count(None, PROTECTED, Outcome::RefusedByFailurePolicy);
                let tried = load.tally.protected(None);
                (shed > metric(&before, SHED.0, &[SHED.1])
                    && (failed > 0 || !want_failure_policy)
                    && tried >= MIN_PROTECTED)
                    .then_some(())
            },
        )
        .await;
        let tally = load.stop().await;
        let after = replica.metrics().await;
        assert!(
            replica.proc.running(),
            "the webhook exited:\n{}",
            replica.proc.log_tail(30)
        );

        let delta = |name: &str, labels: &[(&str, &str)]| {
            metric(&after, name, labels) - metric(&before, name, labels)
        };
        let shed = delta(SHED.0, &[SHED.1]);
        println!("{}", tally.report());
        println!(
            "webhook (timeoutSeconds {timeout_seconds}): {shed} admission calls shed \
             ({} at /validate, {} at /mutate), {} reviews answered ({} denied), \
             for {} protected edits",
            delta(SHED.0, &[SHED.1, ("endpoint", "validate")]),
            delta(SHED.0, &[SHED.1, ("endpoint", "mutate")]),
            delta(ADMISSIONS, &[]),
            delta(ADMISSIONS, &[("verdict", "denied")]),
            tally.protected(None)
        );

        // Shedding happened, and the webhook counted it.
        assert!(shed > 0.0, "no admission was shed");
        tally.assert_no_protected_edit_allowed_and_every_unrelated_write_succeeded();
        // Unrelated ConfigMaps never reached the webhook: every create of one was allowed,
        // and the webhook answered no ConfigMap CREATE during the load.
        assert!(tally.count(None, UNRELATED, Outcome::Allowed) > 0);
        assert_eq!(
            delta(
                ADMISSIONS,
                &[("kind", "ConfigMap"), ("operation", "CREATE")]
            ),
            0.0,
            "unrelated ConfigMap creates reached the webhook"
        );
        objects.assert_unchanged(&cp, &ns).await;
        assert_audit_shows_no_protected_edit(&cp, &ns, tally.protected(None)).await;
        Overload {
            cp,
            ns,
            replica,
            tally,
            shed,
        }
    }

    fn finish(self) {
        drop(self.replica);
        self.cp.stop();
    }
}

// ---------------------------------------------------------------------------------------
// The webhook binary
// ---------------------------------------------------------------------------------------

/// `holdfast_webhook_request_errors_total{reason="overloaded"}`: shed admissions.
const SHED: (&str, (&str, &str)) = (
    "holdfast_webhook_request_errors_total",
    ("reason", "overloaded"),
);
/// Answered AdmissionReviews.
const ADMISSIONS: &str = "holdfast_webhook_admissions_total";

fn trainjobs() -> ApiResource {
    holdfast_cluster::resources::trainjob()
}

fn configmap(name: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"runtime": SNAPSHOT_DATA},
    }))
    .expect("configmap json")
}

fn trainjob(name: &str, annotations: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"runtimeRef": {"name": "no-such-runtime"}},
    }))
    .expect("trainjob json")
}

/// The protected objects: a snapshot ConfigMap the controller created and a TrainJob the
/// controller holds.
struct Objects;

impl Objects {
    async fn create(cp: &ControlPlane, ns: &str) -> Objects {
        let admin = cp.client(Identity::Admin).await.expect("admin");
        let controller = cp.client(Identity::Controller).await.expect("controller");
        Api::<ConfigMap>::namespaced(controller.clone(), ns)
            .create(&PostParams::default(), &configmap(SNAPSHOT))
            .await
            .expect("the controller creates the snapshot");
        Api::<DynamicObject>::namespaced_with(admin, ns, &trainjobs())
            .create(&PostParams::default(), &trainjob(HELD, json!({})))
            .await
            .expect("TrainJob");
        // The controller holds it by an update (its role has no patch).
        let tjs = Api::<DynamicObject>::namespaced_with(controller, ns, &trainjobs());
        let mut held = tjs.get(HELD).await.expect("the TrainJob");
        held.metadata.annotations = Some(
            [
                (HOLD.to_string(), "3".to_string()),
                (HOLD_REASON.to_string(), "node lost".to_string()),
            ]
            .into(),
        );
        held.data["spec"]["suspend"] = json!(true);
        tjs.replace(HELD, &PostParams::default(), &held)
            .await
            .expect("the controller holds the TrainJob");
        Objects
    }

    /// Both read back exactly as the controller wrote them.
    async fn assert_unchanged(&self, cp: &ControlPlane, ns: &str) {
        let admin = cp.client(Identity::Admin).await.expect("admin");
        let cm = Api::<ConfigMap>::namespaced(admin.clone(), ns)
            .get(SNAPSHOT)
            .await
            .expect("the snapshot");
        let data: BTreeMap<String, String> =
            [("runtime".to_string(), SNAPSHOT_DATA.to_string())].into();
        assert_eq!(cm.data, Some(data), "the snapshot was changed");
        let tj = Api::<DynamicObject>::namespaced_with(admin, ns, &trainjobs())
            .get(HELD)
            .await
            .expect("the held TrainJob");
        let annotations = tj.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations.get(HOLD).map(String::as_str),
            Some("3"),
            "{annotations:?}"
        );
        assert_eq!(
            annotations.get(HOLD_REASON).map(String::as_str),
            Some("node lost")
        );
        assert_eq!(tj.data["spec"]["suspend"], true);
    }
}

// ---------------------------------------------------------------------------------------
// The load and its outcomes
// ---------------------------------------------------------------------------------------

/// When a write was started, relative to the kill of a replica (the overload runs kill
/// nothing: all their writes are `BeforeKill`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    BeforeKill,
    AfterKill,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// The plain user edits the snapshot ConfigMap's data: must be refused.
    SnapshotEdit,
    /// The plain user changes the held TrainJob's hold annotation: must be refused.
    HoldEdit,
    /// The plain user creates or edits an ordinary ConfigMap: must succeed.
    Unrelated,
}

const PROTECTED: &[Kind] = &[Kind::SnapshotEdit, Kind::HoldEdit];
const UNRELATED: &[Kind] = &[Kind::Unrelated];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    /// The write went through.
    Allowed,
    /// 403 from one of holdfast's validating webhooks, with the policy's reason.
    DeniedByWebhook,
    /// The call to one of holdfast's webhooks failed and `failurePolicy: Fail` refused it.
    RefusedByFailurePolicy,
    /// Anything else.
    OtherError,
}

const OUTCOMES: [Outcome; 4] = [
    Outcome::Allowed,
    Outcome::DeniedByWebhook,
    Outcome::RefusedByFailurePolicy,
    Outcome::OtherError,
];

/// Classify a write's result; `words` must all be in a denial by the webhook.
fn outcome<T>(r: &Result<T, kube::Error>, words: &[&str]) -> (Outcome, String) {
    match r {
        Ok(_) => (Outcome::Allowed, String::new()),
        Err(kube::Error::Api(s)) => {
            let m = &s.message;
            let o = if s.code == 403
                && m.contains(".validate.holdfast.dev\" denied the request")
                && words.iter().all(|w| m.contains(w))
            {
                Outcome::DeniedByWebhook
            } else if m.contains("failed calling webhook \"") && m.contains(".holdfast.dev\"") {
                Outcome::RefusedByFailurePolicy
            } else {
                Outcome::OtherError
            };
            (o, format!("{} {}: {m}", s.code, s.reason))
        }
        Err(e) => (Outcome::OtherError, e.to_string()),
    }
}

/// Every outcome, counted, with some of the messages seen.
#[derive(Default)]
struct Tally {
    inner: Mutex<TallyInner>,
}

#[derive(Default)]
struct TallyInner {
    counts: BTreeMap<(Phase, Kind, Outcome), usize>,
    /// Per (kind, outcome): the first two messages, every unexpected one, and every refusal
    /// by the failure policy (they are few, and their wording is what is checked).
    messages: BTreeMap<(Kind, Outcome), Vec<String>>,
}

impl Tally {
    fn record(&self, phase: Phase, kind: Kind, outcome: Outcome, message: String) {
        let mut t = self.inner.lock().unwrap();
        *t.counts.entry((phase, kind, outcome)).or_default() += 1;
        let keep_all = outcome == Outcome::RefusedByFailurePolicy
            || match kind {
                Kind::Unrelated => outcome != Outcome::Allowed,
                _ => matches!(outcome, Outcome::Allowed | Outcome::OtherError),
            };
        let kept = t.messages.entry((kind, outcome)).or_default();
        if !message.is_empty() && (keep_all || kept.len() < 2) {
            kept.push(message);
        }
    }

    /// How many writes of `kinds` came out as `outcome`, in `phase` (or either).
    fn count(&self, phase: Option<Phase>, kinds: &[Kind], outcome: Outcome) -> usize {
        let t = self.inner.lock().unwrap();
        t.counts
            .iter()
            .filter(|((p, k, o), _)| {
                phase.is_none_or(|ph| ph == *p) && kinds.contains(k) && *o == outcome
            })
            .map(|(_, n)| n)
            .sum()
    }

    /// Protected edits sent, in `phase` (or either).
    fn protected(&self, phase: Option<Phase>) -> usize {
        OUTCOMES
            .into_iter()
            .map(|o| self.count(phase, PROTECTED, o))
            .sum()
    }

    /// The messages kept for `outcome` (any kind).
    fn messages(&self, outcome: Outcome) -> Vec<String> {
        let t = self.inner.lock().unwrap();
        t.messages
            .iter()
            .filter(|((_, o), _)| *o == outcome)
            .flat_map(|(_, ms)| ms.iter().cloned())
            .collect()
    }

    fn report(&self) -> String {
        let t = self.inner.lock().unwrap();
        let mut out = String::from("outcomes (phase, kind, outcome: count):\n");
        for ((p, k, o), n) in &t.counts {
            out.push_str(&format!("  {p:?}, {k:?}, {o:?}: {n}\n"));
        }
        out.push_str("messages seen (some):\n");
        for ((k, o), ms) in &t.messages {
            let mut distinct: Vec<&String> = Vec::new();
            for m in ms {
                // One line per wording: the values written differ from edit to edit.
                let shape = |s: &str| s.replace(|c: char| c.is_ascii_digit(), "");
                if !distinct.iter().any(|d| shape(d) == shape(m)) {
                    distinct.push(m);
                }
            }
            for m in distinct {
                out.push_str(&format!("  {k:?} {o:?}: {m}\n"));
            }
        }
        out
    }

    #[track_caller]
    fn assert_no_protected_edit_allowed_and_every_unrelated_write_succeeded(&self) {
        let report = self.report();
        assert_eq!(
            self.count(None, PROTECTED, Outcome::Allowed),
            0,
            "a protected edit went through\n{report}"
        );
        assert_eq!(
            self.count(None, PROTECTED, Outcome::OtherError),
            0,
            "a protected edit was refused, but not by holdfast's webhook nor its failure policy\n{report}"
        );
        let refused = self.count(None, PROTECTED, Outcome::DeniedByWebhook)
            + self.count(None, PROTECTED, Outcome::RefusedByFailurePolicy);
        assert_eq!(refused, self.protected(None), "{report}");
        for o in [
            Outcome::DeniedByWebhook,
            Outcome::RefusedByFailurePolicy,
            Outcome::OtherError,
        ] {
            assert_eq!(
                self.count(None, UNRELATED, o),
                0,
                "an unrelated write failed ({o:?})\n{report}"
            );
        }
    }
}

/// Concurrent writers, as the plain user, until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    /// Set by the test once a replica is dead: writes started afterwards are `AfterKill`.
    killed: Arc<AtomicBool>,
    tally: Arc<Tally>,
    writers: Vec<JoinHandle<()>>,
}

impl Load {
    async fn start(cp: &ControlPlane, ns: &str, writers: usize) -> Load {
        let alice = cp.client(Identity::User).await.expect("alice");
        let stop = Arc::new(AtomicBool::new(false));
        let killed = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally::default());
        let writers = (0..writers)
            .map(|w| {
                tokio::spawn(writer(
                    w,
                    alice.clone(),
                    ns.to_owned(),
                    stop.clone(),
                    killed.clone(),
                    tally.clone(),
                ))
            })
            .collect();
        Load {
            stop,
            killed,
            tally,
            writers,
        }
    }

    async fn stop(self) -> Arc<Tally> {
        self.stop.store(true, Ordering::SeqCst);
        for w in self.writers {
            w.await.expect("a writer panicked");
        }
        self.tally
    }
}

/// One writer: in turn, edits the snapshot's data, edits the hold annotation, and creates
/// then edits an ordinary ConfigMap of its own. Every value written is new, so an edit that
/// went through would show.
async fn writer(
    w: usize,
    alice: kube::Client,
    ns: String,
    stop: Arc<AtomicBool>,
    killed: Arc<AtomicBool>,
    tally: Arc<Tally>,
) {
    let cms = Api::<ConfigMap>::namespaced(alice.clone(), &ns);
    let tjs = Api::<DynamicObject>::namespaced_with(alice, &ns, &trainjobs());
    let pp = PatchParams::default();
    let mut i = 0usize;
    while !stop.load(Ordering::SeqCst) {
        let phase = if killed.load(Ordering::SeqCst) {
            Phase::AfterKill
        } else {
            Phase::BeforeKill
        };
        let value = format!("evil-{w}-{i}");
        match (w + i) % 3 {
            0 => {
                let patch = Patch::Merge(json!({"data": {"runtime": value}}));
                let r = cms.patch(SNAPSHOT, &pp, &patch).await;
                let (o, m) = outcome(&r, &["is a runtime snapshot", "may not update it"]);
                tally.record(phase, Kind::SnapshotEdit, o, m);
            }
            1 => {
                let patch = Patch::Merge(json!({"metadata": {"annotations": {HOLD: value}}}));
                let r = tjs.patch(HELD, &pp, &patch).await;
                let (o, m) = outcome(&r, &[HOLD, "may not change it"]);
                tally.record(phase, Kind::HoldEdit, o, m);
            }
            _ => {
                let name = format!("free-{w}-{i}");
                let mut cm = configmap(&name);
                cm.metadata.labels = Some([("app".to_string(), "free".to_string())].into());
                let r = cms.create(&PostParams::default(), &cm).await;
                let (o, m) = outcome(&r, &[]);
                tally.record(phase, Kind::Unrelated, o, m);
                let patch = Patch::Merge(json!({"data": {"runtime": format!("ok-{w}-{i}")}}));
                let r = cms.patch(&name, &pp, &patch).await;
                let (o, m) = outcome(&r, &[]);
                tally.record(phase, Kind::Unrelated, o, m);
            }
        }
        i += 1;
    }
}

/// The audit log: every protected edit the clients sent reached the apiserver (one event
/// each) and none of them succeeded.
async fn assert_audit_shows_no_protected_edit(cp: &ControlPlane, ns: &str, sent: usize) {
    let events = cp.settled_audit_events().await.expect("audit log");
    let mut by_code: BTreeMap<i64, usize> = BTreeMap::new();
    for e in &events {
        let s = |p: &str| e.pointer(p).and_then(Value::as_str).unwrap_or_default();
        if s("/user/username") == Identity::User.username()
            && s("/objectRef/namespace") == ns
            && matches!(s("/objectRef/name"), SNAPSHOT | HELD)
            && s("/verb") == "patch"
        {
            let code = e
                .pointer("/responseStatus/code")
                .and_then(Value::as_i64)
                .unwrap_or_default();
            *by_code.entry(code).or_default() += 1;
        }
    }
    println!("audit log, the user's edits of the protected objects by response code: {by_code:?}");
    let succeeded: usize = by_code
        .iter()
        .filter(|(c, _)| (200..300).contains(*c))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(
        succeeded, 0,
        "the audit log shows protected edits that succeeded"
    );
    assert_eq!(
        by_code.values().sum::<usize>(),
        sent,
        "the audit log does not show every protected edit sent"
    );
}

/// Send bursts of concurrent AdmissionReviews straight to the webhook (as the apiserver
/// would) until one is shed; returns (answered, shed, the first shed answer as text).
///
/// The client is one HTTP/1.1 connection per request in flight, from an address of its own
/// (127.0.0.9, not the apiserver's 127.0.0.1): the webhook keeps at most 32 connections open
/// per source address, so the burst stays below that.
async fn shed_directly(cp: &ControlPlane, port: u16, ns: &str) -> (usize, usize, String) {
    const BURST: usize = 24;
    let client = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 9]))
        .add_root_certificate(
            reqwest::Certificate::from_pem(cp.ca_pem().as_bytes()).expect("CA certificate"),
        )
        .build()
        .expect("https client");
    let url = format!("https://127.0.0.1:{port}/validate");
    let cm = |data: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": SNAPSHOT, "namespace": ns}, "data": {"runtime": data}})
    };
    let (mut answered, mut shed, mut sample) = (0, 0, String::new());
    for round in 0..20 {
        let answers = futures::future::join_all((0..BURST).map(|i| {
            let review = json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": format!("direct-{round}-{i}"),
                    "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                    "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                    "name": SNAPSHOT,
                    "namespace": ns,
                    "operation": "UPDATE",
                    "userInfo": {"username": Identity::User.username()},
                    "object": cm("kind: Evil\n"),
                    "oldObject": cm(SNAPSHOT_DATA),
                    "dryRun": false,
                },
            });
            client.post(&url).json(&review).send()
        }))
        .await;
        for a in answers {
            let a = a.expect("the webhook answers over HTTPS");
            let status = a.status();
            if status == reqwest::StatusCode::OK {
                answered += 1;
                continue;
            }
            assert_eq!(status, reqwest::StatusCode::SERVICE_UNAVAILABLE);
            shed += 1;
            if sample.is_empty() {
                let retry = a
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let body = a.text().await.expect("body");
                sample = format!("{} Retry-After: {retry} {body}", status.as_u16());
            }
        }
        if shed > 0 {
            break;
        }
    }
    (answered, shed, sample)
}

// ---------------------------------------------------------------------------------------
// The load balancer
// ---------------------------------------------------------------------------------------

/// A TCP load balancer on loopback: each accepted connection goes to the next backend in
/// turn; a backend that refuses the connection is skipped for the next one (as a Service
/// whose endpoint is gone). TLS passes through untouched.
struct Balancer {
    port: u16,
    /// Per backend: connections forwarded to it, and connections it refused.
    forwarded: Arc<Vec<AtomicUsize>>,
    refused: Arc<Vec<AtomicUsize>>,
    accept: JoinHandle<()>,
}

impl Balancer {
    async fn start(backends: Vec<SocketAddr>) -> Balancer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let n = backends.len();
        let forwarded: Arc<Vec<AtomicUsize>> =
            Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect());
        let refused: Arc<Vec<AtomicUsize>> =
            Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect());
        let backends = Arc::new(backends);
        let (fw, rf) = (forwarded.clone(), refused.clone());
        let accept = tokio::spawn(async move {
            let mut next = 0usize;
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    continue;
                };
                let first = next % n;
                next += 1;
                let (backends, fw, rf) = (backends.clone(), fw.clone(), rf.clone());
                tokio::spawn(async move {
                    for k in 0..n {
                        let i = (first + k) % n;
                        match TcpStream::connect(backends[i]).await {
                            Ok(mut backend) => {
                                fw[i].fetch_add(1, Ordering::SeqCst);
                                let _ =
                                    tokio::io::copy_bidirectional(&mut client, &mut backend).await;
                                return;
                            }
                            Err(_) => {
                                rf[i].fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                    // No backend: the client's connection is closed.
                });
            }
        });
        Balancer {
            port,
            forwarded,
            refused,
            accept,
        }
    }

    fn report(&self) -> String {
        let f: Vec<usize> = self
            .forwarded
            .iter()
            .map(|a| a.load(Ordering::SeqCst))
            .collect();
        let r: Vec<usize> = self
            .refused
            .iter()
            .map(|a| a.load(Ordering::SeqCst))
            .collect();
        format!("connections forwarded per replica {f:?}, refused per replica {r:?}")
    }

    fn stop(&self) {
        self.accept.abort();
    }
}
