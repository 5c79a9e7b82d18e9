//! Leader election by a `coordination.k8s.io/v1` Lease, so that of several controller
//! replicas exactly one writes.
//!
//! The algorithm is client-go's `leaderelection` (the one kube-controller-manager uses):
//!
//! - A replica is leader while the Lease's `holderIdentity` is its identity. It renews the
//!   Lease (`renewTime`) every [`LeaseConfig::renew_period`].
//! - A standby polls every [`LeaseConfig::retry_period`] and takes the Lease over once the
//!   holder has not renewed it for `leaseDurationSeconds`, measured on the standby's own
//!   monotonic clock from the moment it last saw the Lease change — never by comparing the
//!   holder's `renewTime` with the local wall clock, so clock skew between nodes does not
//!   matter. A Lease with no holder (released) is taken over at once.
//! - Every write is a whole-object replace preconditioned on the Lease's `resourceVersion`
//!   (optimistic concurrency): of two replicas racing for an expired Lease, the apiserver lets
//!   exactly one through and answers the other 409.
//! - The leader gives up — stops its work and returns [`LeaderError::Lost`] — as soon as it
//!   sees another holder, or when it has not managed to renew for
//!   [`LeaseConfig::renew_deadline`], which is shorter than the lease duration: it stops
//!   writing before any standby may start.
//! - On a graceful end the leader releases the Lease (empty holder), so a standby takes over
//!   without waiting for it to expire.
//!
//! [`run_as_leader`] wraps any work in this: the work starts only once the Lease is held and
//! is dropped (its in-flight requests abandoned) the moment leadership is lost.
//!
//! A replica that cannot lead as configured — RBAC forbids its Lease, the Lease namespace
//! does not exist, its credentials are rejected — says so loudly: an error log naming the
//! cause and what to fix (once per cause, again every minute while it lasts), the counter
//! `holdfast_leader_acquire_failures`, the gauge `holdfast_leader_cannot_lead`, and a failing
//! `/readyz` until an attempt gets through. The decisions are in [`decide`], apart from the
//! I/O, each a row of its unit tables.

pub mod decide;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use decide::{Failure, Step};

/// Which Lease, who we are, and the timings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's `holderIdentity` (unique per replica: the pod name).
    pub identity: String,
    /// How long a standby waits, after the Lease last changed, before taking it over.
    pub lease_duration: Duration,
    /// The leader gives up if it could not renew for this long; shorter than `lease_duration`.
    pub renew_deadline: Duration,
    /// How often the leader renews.
    pub renew_period: Duration,
    /// How often a standby looks at the Lease, and how soon the leader retries a failed renew.
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// A Lease with the default timings: 15 s duration, renewed every 5 s, given up after
    /// 10 s without a successful renew, standbys polling every 2 s.
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        LeaseConfig {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            renew_period: Duration::from_secs(5),
            retry_period: Duration::from_secs(2),
        }
    }

    /// The same timings scaled down (for tests): duration `d`, renew deadline 2/3 d, renew
    /// every d/3, standbys poll every d/5.
    pub fn with_lease_duration(mut self, d: Duration) -> Self {
        self.lease_duration = d;
        self.renew_deadline = d * 2 / 3;
        self.renew_period = d / 3;
        self.retry_period = d / 5;
        self
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }
}

/// The host name (a pod's name), else a name unique to this process: the identity of a
/// replica that is given none.
pub fn default_identity() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| format!("holdfast-controller-{}", std::process::id()))
}

/// Why leadership ended other than by a graceful shutdown.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// Another replica holds the Lease now, or it could not be renewed in time. Whatever ran
    /// under the Lease has been stopped; the process should exit.
    #[error("lost the Lease {namespace}/{name}: {reason}")]
    Lost {
        namespace: String,
        name: String,
        reason: String,
    },
    /// The configuration cannot work.
    #[error("invalid lease configuration: {0}")]
    Config(&'static str),
}

impl LeaderError {
    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            LeaderError::Lost { .. } => "lost",
            LeaderError::Config(_) => "config",
        }
    }
}

/// Leader election's metrics.
#[derive(Clone, Debug, Default)]
pub struct LeaderMetrics {
    /// 1 while this replica holds the Lease.
    pub is_leader: Gauge,
    /// Times this replica became leader.
    pub acquired: Counter,
    /// Times this replica lost the Lease.
    pub lost: Counter,
    /// Lease requests that failed other than by contention (a 409).
    pub acquire_failures: Counter,
    /// 1 while the last Lease request failed in a way retrying cannot fix
    /// ([`decide::Failure::CannotLead`]); readiness fails meanwhile.
    pub cannot_lead: Gauge,
}

impl LeaderMetrics {
    /// Whether the last Lease request showed this replica cannot lead as configured.
    pub fn cannot_lead(&self) -> bool {
        self.cannot_lead.get() != 0
    }
}

impl LeaderMetrics {
    /// Registers the metrics (`holdfast_leader*`) into `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "holdfast_leader",
            "1 while this replica holds the leader-election Lease",
            self.is_leader.clone(),
        );
        registry.register(
            "holdfast_leader_acquired",
            "Times this replica became leader",
            self.acquired.clone(),
        );
        registry.register(
            "holdfast_leader_lost",
            "Times this replica lost the leader-election Lease",
            self.lost.clone(),
        );
        registry.register(
            "holdfast_leader_acquire_failures",
            "Lease requests that failed other than by contention",
            self.acquire_failures.clone(),
        );
        registry.register(
            "holdfast_leader_cannot_lead",
            "1 while this replica's Lease requests fail in a way retrying cannot fix (RBAC, credentials, a missing namespace)",
            self.cannot_lead.clone(),
        );
    }
}

/// Waits until this replica holds the Lease, then runs `work` while renewing it.
///
/// - `Ok(None)`: `shutdown` was cancelled before leadership was acquired.
/// - `Ok(Some(out))`: `work` finished (e.g. because `shutdown` was cancelled: `work` gets a
///   child token of it); the Lease has been released.
/// - `Err(LeaderError::Lost)`: leadership was lost; `work` has been dropped.
pub async fn run_as_leader<F, Fut, T>(
    client: kube::Client,
    config: LeaseConfig,
    metrics: LeaderMetrics,
    shutdown: CancellationToken,
    work: F,
) -> Result<Option<T>, LeaderError>
where
    F: FnOnce(CancellationToken) -> Fut,
    Fut: Future<Output = T>,
{
    if config.renew_deadline >= config.lease_duration {
        return Err(LeaderError::Config(
            "the renew deadline must be shorter than the lease duration",
        ));
    }
    if config.renew_period >= config.renew_deadline {
        return Err(LeaderError::Config(
            "the renew period must be shorter than the renew deadline",
        ));
    }
    let mut elector = Elector::new(client, config, metrics.clone());
    tokio::select! {
        () = shutdown.cancelled() => return Ok(None),
        () = elector.acquire() => {}
    }
    metrics.is_leader.set(1);
    metrics.acquired.inc();
    tracing::info!(
        lease = %elector.lease_name(),
        identity = %elector.config.identity,
        "became leader"
    );

    let token = shutdown.child_token();
    let work = work(token.clone());
    let outcome = {
        let renewing = elector.keep_renewing();
        tokio::pin!(renewing);
        tokio::pin!(work);
        tokio::select! {
            out = &mut work => Ok(out),
            lost = &mut renewing => Err(lost),
        }
    };
    metrics.is_leader.set(0);
    match outcome {
        Ok(out) => {
            elector.release().await;
            tracing::info!(lease = %elector.lease_name(), "released the lease");
            Ok(Some(out))
        }
        Err(reason) => {
            token.cancel();
            metrics.lost.inc();
            tracing::error!(lease = %elector.lease_name(), %reason, "lost the lease; stopping");
            Err(LeaderError::Lost {
                namespace: elector.config.namespace.clone(),
                name: elector.config.name.clone(),
                reason,
            })
        }
    }
}

/// The Lease as last seen, and when it was last seen to change.
struct Observed {
    lease: Lease,
    changed_at: Instant,
}

struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    observed: Option<Observed>,
    metrics: LeaderMetrics,
    /// The last failure logged, and when: the same one is logged again only after
    /// [`REPEAT_LOG`].
    last_logged: Option<(String, Instant)>,
}

/// How often a failure that lasts is logged again.
const REPEAT_LOG: Duration = Duration::from_secs(60);

/// What one acquire-or-renew attempt found.
enum Attempt {
    /// We hold the Lease (just acquired or renewed).
    Held,
    /// Another replica holds it and it has not expired.
    HeldByOther(String),
    /// The apiserver refused or failed the write or read; `kind` says whether trying again
    /// can help.
    Failed { why: String, kind: Failure },
}

impl Elector {
    fn new(client: kube::Client, config: LeaseConfig, metrics: LeaderMetrics) -> Self {
        Elector {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
            metrics,
            last_logged: None,
        }
    }

    /// A failed request on the Lease, classified.
    fn failed(&self, request: decide::Request, e: &kube::Error) -> Attempt {
        let status = match e {
            kube::Error::Api(s) => Some(s.code),
            _ => None,
        };
        let doing = match request {
            decide::Request::Read => "reading the lease",
            decide::Request::Create => "creating the lease",
            decide::Request::Replace => "writing the lease",
        };
        Attempt::Failed {
            why: format!("{doing}: {e}"),
            kind: decide::failure(request, status, &self.config.namespace),
        }
    }

    /// Records what an attempt found: the metrics, and a log line for a failure that is new
    /// or has lasted another [`REPEAT_LOG`].
    fn record(&mut self, attempt: &Attempt) {
        let Attempt::Failed { why, kind } = attempt else {
            if self.metrics.cannot_lead() {
                tracing::info!(lease = %self.lease_name(), "the lease is reachable again");
            }
            self.metrics.cannot_lead.set(0);
            self.last_logged = None;
            return;
        };
        if *kind == Failure::Contended {
            tracing::debug!(lease = %self.lease_name(), %why, "lease contended");
            return;
        }
        self.metrics.acquire_failures.inc();
        let text = match kind {
            Failure::CannotLead(fix) => {
                self.metrics.cannot_lead.set(1);
                format!("{why}; {fix}")
            }
            _ => why.clone(),
        };
        let due = match &self.last_logged {
            Some((last, at)) => *last != text || at.elapsed() >= REPEAT_LOG,
            None => true,
        };
        if !due {
            return;
        }
        match kind {
            Failure::CannotLead(_) => tracing::error!(
                lease = %self.lease_name(),
                identity = %self.config.identity,
                cause = %text,
                "this replica cannot lead: no snapshots or readmission gate run here until this is fixed"
            ),
            _ => {
                tracing::warn!(lease = %self.lease_name(), cause = %text, "lease request failed; retrying")
            }
        }
        self.last_logged = Some((text, Instant::now()));
    }

    fn lease_name(&self) -> String {
        format!("{}/{}", self.config.namespace, self.config.name)
    }

    /// Returns once the Lease is ours.
    async fn acquire(&mut self) {
        let mut last_other: Option<String> = None;
        loop {
            let attempt = self.try_acquire_or_renew().await;
            self.record(&attempt);
            match attempt {
                Attempt::Held => return,
                Attempt::HeldByOther(holder) => {
                    if last_other.as_deref() != Some(holder.as_str()) {
                        tracing::info!(lease = %self.lease_name(), %holder, "standing by");
                        last_other = Some(holder);
                    }
                }
                Attempt::Failed { .. } => {}
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
    }

    /// Renews until leadership is lost; returns why.
    async fn keep_renewing(&mut self) -> String {
        let mut last_renew = Instant::now();
        loop {
            tokio::time::sleep(self.config.renew_period).await;
            loop {
                let deadline = last_renew + self.config.renew_deadline;
                let now = Instant::now();
                if decide::must_give_up(now - last_renew, self.config.renew_deadline) {
                    return format!(
                        "not renewed for {:?} (renew deadline)",
                        self.config.renew_deadline
                    );
                }
                let attempt =
                    tokio::time::timeout(deadline - now, self.try_acquire_or_renew()).await;
                if let Ok(a) = &attempt {
                    self.record(a);
                }
                match attempt {
                    Ok(Attempt::Held) => {
                        last_renew = Instant::now();
                        break;
                    }
                    Ok(Attempt::HeldByOther(holder)) => {
                        return format!("the lease is held by {holder:?}");
                    }
                    Ok(Attempt::Failed { .. }) => {
                        let now = Instant::now();
                        let wait = self
                            .config
                            .retry_period
                            .min(deadline.saturating_duration_since(now));
                        tokio::time::sleep(wait).await;
                    }
                    Err(_elapsed) => {
                        return format!(
                            "not renewed for {:?} (renew deadline)",
                            self.config.renew_deadline
                        );
                    }
                }
            }
        }
    }

    /// One step of client-go's `tryAcquireOrRenew`: read (unless we lead: we renew from
    /// what we last wrote), [`decide::step`], write.
    async fn try_acquire_or_renew(&mut self) -> Attempt {
        let now = Timestamp::now();
        let current = match &self.observed {
            Some(o) if self.holds(&o.lease) => Some(o.lease.clone()),
            _ => match self.api.get_opt(&self.config.name).await {
                Ok(lease) => lease,
                Err(e) => return self.failed(decide::Request::Read, &e),
            },
        };
        if let Some(current) = &current {
            self.observe(current);
        }
        let holder = current
            .as_ref()
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default();
        let seen = current.as_ref().map(|l| decide::Seen {
            holder: &holder,
            duration: l
                .spec
                .as_ref()
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .map(Duration::from_secs),
            unchanged_for: self
                .observed
                .as_ref()
                .map(|o| o.changed_at.elapsed())
                .unwrap_or_default(),
        });
        let transition = match decide::step(
            &self.config.identity,
            seen.as_ref(),
            self.config.lease_duration,
        ) {
            Step::Create => return self.create(now).await,
            Step::Standby { holder } => return Attempt::HeldByOther(holder),
            Step::Write { transition } => transition,
        };
        let Some(current) = current else {
            return self.create(now).await;
        };
        let old = current.spec.clone().unwrap_or_default();
        let spec = LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.config.lease_seconds()),
            renew_time: Some(MicroTime(now)),
            acquire_time: if transition {
                Some(MicroTime(now))
            } else {
                old.acquire_time.clone().or(Some(MicroTime(now)))
            },
            lease_transitions: if transition {
                Some(old.lease_transitions.unwrap_or(0).saturating_add(1))
            } else {
                old.lease_transitions
            },
            ..old
        };
        // `current` carries the resourceVersion: the replace is preconditioned on it.
        let mut next = current;
        next.metadata.managed_fields = None;
        next.spec = Some(spec);
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &next)
            .await
        {
            Ok(written) => {
                self.observe(&written);
                Attempt::Held
            }
            Err(e) => {
                if matches!(&e, kube::Error::Api(s) if s.code == 409 || s.code == 404) {
                    // Someone else wrote first, or the Lease was deleted: forget our copy,
                    // read afresh next time.
                    self.observed = None;
                }
                self.failed(decide::Request::Replace, &e)
            }
        }
    }

    async fn create(&mut self, now: Timestamp) -> Attempt {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.config.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.config.identity.clone()),
                lease_duration_seconds: Some(self.config.lease_seconds()),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(written) => {
                self.observe(&written);
                Attempt::Held
            }
            Err(e) => self.failed(decide::Request::Create, &e),
        }
    }

    fn holds(&self, lease: &Lease) -> bool {
        lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(self.config.identity.as_str())
    }

    /// Records the Lease as seen, restarting the expiry clock when it changed.
    fn observe(&mut self, lease: &Lease) {
        let changed = match &self.observed {
            Some(o) => o.lease.metadata.resource_version != lease.metadata.resource_version,
            None => true,
        };
        if changed {
            self.observed = Some(Observed {
                lease: lease.clone(),
                changed_at: Instant::now(),
            });
        }
    }

    /// Gives the Lease up (empty holder, 1 s duration), if we still hold it.
    async fn release(&mut self) {
        let Some(observed) = self.observed.take() else {
            return;
        };
        if !self.holds(&observed.lease) {
            return;
        }
        let now = Timestamp::now();
        let mut next = observed.lease;
        next.metadata.managed_fields = None;
        let old = next.spec.take().unwrap_or_default();
        next.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            renew_time: Some(MicroTime(now)),
            acquire_time: Some(MicroTime(now)),
            ..old
        });
        if let Err(e) = self
            .api
            .replace(&self.config.name, &PostParams::default(), &next)
            .await
        {
            tracing::warn!(lease = %self.lease_name(), error = %e, "releasing the lease failed; it will expire");
        }
    }
}
