//! What callers may cost the hold API beyond their connections (those are bounded by
//! `holdfast_serve::connections`): the apiserver reviews in flight, in all; the failed
//! authentications of one source address; the requests in flight of one user; and the time a
//! request body may take to arrive.
//!
//! - **Reviews in flight** ([`ApiLimits::max_reviews_in_flight`]): every TokenReview and
//!   SubjectAccessReview the cache cannot answer takes a permit, waiting at most
//!   [`REVIEW_PERMIT_WAIT`] for one (first come, first served); a request that gets none is
//!   answered `503` with `Retry-After`. A flood of random tokens therefore sends the apiserver
//!   at most this many reviews at once, on the controller's own identity. A *suspect* source
//!   (one with a refused token within [`FAILURE_WINDOW`]) may hold only half of them, so a
//!   source with no refusals — the holder's — always finds a permit free, however many
//!   sources flood.
//! - **Failed authentications per source** ([`ApiLimits::failed_reviews_per_source`] per
//!   [`FAILURE_WINDOW`], a token bucket per address): a TokenReview takes one of its source's
//!   tokens before it is sent and gives it back if the token was accepted. A source with none
//!   left is answered `429` with `Retry-After`, without a review. Kept for
//!   [`MAX_SOURCES`] addresses at most (the fullest buckets go first: they cost nothing).
//! - **Requests in flight per user** ([`ApiLimits::max_requests_per_user`]), counted from the
//!   moment the caller is allowed until its answer: `429` with `Retry-After` beyond it.
//!
//! Pure bookkeeping and its metrics; time is passed in where it matters.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use holdfast_serve::Declared;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge};
use prometheus_client::registry::Registry;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a request waits for a review permit before it is answered 503.
pub const REVIEW_PERMIT_WAIT: Duration = Duration::from_secs(1);
/// The window of [`ApiLimits::failed_reviews_per_source`]: a source's bucket refills
/// completely in this long.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(10);
/// Source addresses whose failures are remembered at most.
pub const MAX_SOURCES: usize = 4096;

/// The hold API's bounds on what callers cost it (besides its connection caps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiLimits {
    /// TokenReviews and SubjectAccessReviews in flight to the apiserver, in all.
    pub max_reviews_in_flight: usize,
    /// TokenReviews one source address may have refused per [`FAILURE_WINDOW`].
    pub failed_reviews_per_source: u32,
    /// Requests of one user name in flight at once.
    pub max_requests_per_user: usize,
    /// Longest time a request body (a call's few hundred bytes) may take to arrive, once its
    /// caller is allowed.
    pub body_read_timeout: Duration,
}

impl ApiLimits {
    pub const DEFAULT: ApiLimits = ApiLimits {
        max_reviews_in_flight: 16,
        failed_reviews_per_source: 20,
        max_requests_per_user: 64,
        body_read_timeout: Duration::from_secs(5),
    };
}

impl Default for ApiLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Why a request was turned away before it was reviewed or served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shed {
    /// No review permit within [`REVIEW_PERMIT_WAIT`]: 503.
    ReviewsInFlight,
    /// The source address has used its failed authentications: 429.
    FailedAuthentications { retry_after: Duration },
    /// The user has [`ApiLimits::max_requests_per_user`] requests in flight: 429.
    RequestsPerUser,
    /// The user has its connections' worth admitted (`holdfast_serve`'s per-user cap): 429.
    ConnectionsPerUser,
}

impl Shed {
    pub fn label(self) -> &'static str {
        match self {
            Shed::ReviewsInFlight => "reviews_in_flight",
            Shed::FailedAuthentications { .. } => "failed_authentications",
            Shed::RequestsPerUser => "requests_per_user",
            Shed::ConnectionsPerUser => "connections_per_user",
        }
    }

    /// Whole seconds for `Retry-After` (at least 1).
    pub fn retry_after_secs(self) -> u64 {
        match self {
            Shed::FailedAuthentications { retry_after } => {
                retry_after.as_secs_f64().ceil().max(1.0) as u64
            }
            _ => 1,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShedLabels {
    reason: &'static str,
}

/// `holdfast_hold_api_reviews_in_flight` and `holdfast_hold_api_shed_total{reason}`.
#[derive(Clone, Debug, Default)]
pub struct LimitMetrics {
    reviews_in_flight: Gauge,
    shed: Family<ShedLabels, Counter>,
}

impl LimitMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = LimitMetrics::default();
        registry.register(
            "holdfast_hold_api_reviews_in_flight",
            "TokenReviews and SubjectAccessReviews the hold API has in flight to the apiserver",
            m.reviews_in_flight.clone(),
        );
        registry.register(
            "holdfast_hold_api_shed",
            "Hold API requests turned away before being reviewed or served, by bound",
            Declared(m.shed.clone()),
        );
        m
    }

    pub fn shed(&self, why: Shed) {
        self.shed
            .get_or_create(&ShedLabels {
                reason: why.label(),
            })
            .inc();
    }
}

/// A token bucket of failed authentications.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The failed authentications of each source address. Pure: time is passed in.
#[derive(Debug)]
pub struct FailureBuckets {
    capacity: f64,
    buckets: HashMap<IpAddr, Bucket>,
}

impl FailureBuckets {
    pub fn new(per_window: u32) -> Self {
        FailureBuckets {
            capacity: f64::from(per_window.max(1)),
            buckets: HashMap::new(),
        }
    }

    fn refill_rate(&self) -> f64 {
        self.capacity / FAILURE_WINDOW.as_secs_f64()
    }

    /// Take one token of `source` for a review; `Err(wait)` when it has none, `wait` being
    /// how long until it has one.
    pub fn take(&mut self, source: IpAddr, now: Instant) -> Result<(), Duration> {
        let (capacity, rate) = (self.capacity, self.refill_rate());
        if !self.buckets.contains_key(&source) && self.buckets.len() >= MAX_SOURCES {
            self.forget_fullest(now);
        }
        let bucket = self.buckets.entry(source).or_insert(Bucket {
            tokens: capacity,
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(capacity);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / rate))
        }
    }

    /// Whether `source`'s bucket is not full by `now`: a token of it was refused lately (or a
    /// review is in flight).
    pub fn has_failed(&self, source: IpAddr, now: Instant) -> bool {
        let (capacity, rate) = (self.capacity, self.refill_rate());
        self.buckets.get(&source).is_some_and(|b| {
            b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * rate < capacity
        })
    }

    /// Give back the token of a review whose token was accepted (or that could not be made).
    pub fn give_back(&mut self, source: IpAddr) {
        let capacity = self.capacity;
        if let Some(bucket) = self.buckets.get_mut(&source) {
            bucket.tokens = (bucket.tokens + 1.0).min(capacity);
        }
    }

    /// Drop the buckets full by `now` (they hold nothing), else the fullest.
    fn forget_fullest(&mut self, now: Instant) {
        let (capacity, rate) = (self.capacity, self.refill_rate());
        let level = |b: &Bucket| {
            (b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * rate).min(capacity)
        };
        self.buckets.retain(|_, b| level(b) < capacity);
        if self.buckets.len() >= MAX_SOURCES {
            let fullest = self
                .buckets
                .iter()
                .max_by(|a, b| level(a.1).total_cmp(&level(b.1)))
                .map(|(k, _)| *k);
            if let Some(k) = fullest {
                self.buckets.remove(&k);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

/// The shared bookkeeping of [`ApiLimits`]; cheap to clone.
#[derive(Clone, Debug)]
pub struct Budget {
    limits: ApiLimits,
    reviews: Arc<Semaphore>,
    /// Half of `reviews`: what suspect sources may hold.
    suspect_reviews: Arc<Semaphore>,
    failures: Arc<Mutex<FailureBuckets>>,
    users: Arc<Mutex<HashMap<String, usize>>>,
    metrics: LimitMetrics,
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new(ApiLimits::DEFAULT, LimitMetrics::default())
    }
}

/// A review permit; the gauge counts it until dropped.
#[derive(Debug)]
pub struct ReviewPermit {
    _permit: OwnedSemaphorePermit,
    _suspect: Option<OwnedSemaphorePermit>,
    gauge: Gauge,
}

impl Drop for ReviewPermit {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// One of a user's requests in flight, until dropped.
#[derive(Debug)]
pub struct UserRequest {
    users: Arc<Mutex<HashMap<String, usize>>>,
    user: String,
}

impl Drop for UserRequest {
    fn drop(&mut self) {
        let mut users = self.users.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = users.get_mut(&self.user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                users.remove(&self.user);
            }
        }
    }
}

impl Budget {
    pub fn new(limits: ApiLimits, metrics: LimitMetrics) -> Self {
        Budget {
            limits,
            reviews: Arc::new(Semaphore::new(limits.max_reviews_in_flight.max(1))),
            suspect_reviews: Arc::new(Semaphore::new((limits.max_reviews_in_flight / 2).max(1))),
            failures: Arc::new(Mutex::new(FailureBuckets::new(
                limits.failed_reviews_per_source,
            ))),
            users: Arc::new(Mutex::new(HashMap::new())),
            metrics,
        }
    }

    pub fn limits(&self) -> ApiLimits {
        self.limits
    }

    /// Count `why` in the metrics.
    pub fn shed(&self, why: Shed) -> Shed {
        self.metrics.shed(why);
        why
    }

    /// A permit to send one review, waiting at most [`REVIEW_PERMIT_WAIT`]; a `suspect`
    /// request ([`is_suspect`](Self::is_suspect)) also takes one of the suspect half.
    pub async fn review_permit(&self, suspect: bool) -> Result<ReviewPermit, Shed> {
        let acquired = tokio::time::timeout(REVIEW_PERMIT_WAIT, async {
            let suspect = match suspect {
                true => Some(self.suspect_reviews.clone().acquire_owned().await?),
                false => None,
            };
            let permit = self.reviews.clone().acquire_owned().await?;
            Ok::<_, tokio::sync::AcquireError>((permit, suspect))
        })
        .await;
        match acquired {
            Ok(Ok((permit, suspect))) => {
                self.metrics.reviews_in_flight.inc();
                Ok(ReviewPermit {
                    _permit: permit,
                    _suspect: suspect,
                    gauge: self.metrics.reviews_in_flight.clone(),
                })
            }
            _ => Err(self.shed(Shed::ReviewsInFlight)),
        }
    }

    /// Whether `source` had a token refused within [`FAILURE_WINDOW`].
    pub fn is_suspect(&self, source: IpAddr) -> bool {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .has_failed(source.to_canonical(), Instant::now())
    }

    /// Take one of `source`'s failed authentications before reviewing its token.
    pub fn take_failure(&self, source: IpAddr) -> Result<(), Shed> {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(source.to_canonical(), Instant::now())
            .map_err(|retry_after| self.shed(Shed::FailedAuthentications { retry_after }))
    }

    /// The token was accepted (or could not be reviewed): not a failure.
    pub fn give_back_failure(&self, source: IpAddr) {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .give_back(source.to_canonical());
    }

    /// Count one request of `user` in flight until the guard is dropped.
    pub fn user_request(&self, user: &str) -> Result<UserRequest, Shed> {
        let mut users = self.users.lock().unwrap_or_else(PoisonError::into_inner);
        let n = users.entry(user.to_owned()).or_default();
        if *n >= self.limits.max_requests_per_user.max(1) {
            return Err(self.shed(Shed::RequestsPerUser));
        }
        *n += 1;
        Ok(UserRequest {
            users: self.users.clone(),
            user: user.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn a_source_gets_its_failures_per_window_and_no_more() {
        let t0 = Instant::now();
        let mut b = FailureBuckets::new(10);
        for _ in 0..10 {
            assert!(b.take(ip("10.0.0.1"), t0).is_ok());
        }
        let wait = b.take(ip("10.0.0.1"), t0).expect_err("spent");
        assert_eq!(
            wait,
            Duration::from_secs(1),
            "one token a second refills ten in 10 s"
        );
        assert!(
            b.take(ip("10.0.0.2"), t0).is_ok(),
            "another source has its own"
        );
        assert!(b.take(ip("10.0.0.1"), t0 + Duration::from_secs(1)).is_ok());
        // A token that was accepted gives its review back.
        b.give_back(ip("10.0.0.1"));
        assert!(b.take(ip("10.0.0.1"), t0 + Duration::from_secs(1)).is_ok());
        assert!(b.take(ip("10.0.0.1"), t0 + Duration::from_secs(1)).is_err());
    }

    #[test]
    fn the_sources_remembered_are_bounded() {
        let t0 = Instant::now();
        let mut b = FailureBuckets::new(2);
        for i in 0..(MAX_SOURCES as u32 + 50) {
            let a = std::net::Ipv4Addr::from(0x0a00_0000 + i);
            let _ = b.take(IpAddr::V4(a), t0);
        }
        assert!(b.len() <= MAX_SOURCES);
    }

    #[tokio::test]
    async fn reviews_in_flight_are_bounded_and_the_rest_shed() {
        let budget = Budget::new(
            ApiLimits {
                max_reviews_in_flight: 2,
                ..ApiLimits::DEFAULT
            },
            LimitMetrics::default(),
        );
        let a = budget.review_permit(false).await.expect("first");
        let _b = budget.review_permit(false).await.expect("second");
        assert_eq!(
            budget.review_permit(false).await.err(),
            Some(Shed::ReviewsInFlight)
        );
        drop(a);
        assert!(budget.review_permit(false).await.is_ok());
    }

    #[tokio::test]
    async fn suspect_sources_hold_at_most_half_the_reviews_and_a_clean_one_gets_in() {
        let budget = Budget::new(
            ApiLimits {
                max_reviews_in_flight: 4,
                failed_reviews_per_source: 3,
                ..ApiLimits::DEFAULT
            },
            LimitMetrics::default(),
        );
        let attacker = ip("10.0.0.1");
        assert!(!budget.is_suspect(attacker));
        budget.take_failure(attacker).expect("a first try");
        assert!(
            budget.is_suspect(attacker),
            "a refused token makes a source suspect"
        );
        let _s1 = budget.review_permit(true).await.expect("suspect 1");
        let _s2 = budget.review_permit(true).await.expect("suspect 2");
        assert_eq!(
            budget.review_permit(true).await.err(),
            Some(Shed::ReviewsInFlight),
            "suspects hold half"
        );
        let _clean = budget
            .review_permit(false)
            .await
            .expect("a clean source gets in");
        budget.give_back_failure(attacker);
        assert!(
            !budget.is_suspect(attacker),
            "an accepted token gives the try back"
        );
    }

    #[test]
    fn a_users_requests_in_flight_are_bounded() {
        let budget = Budget::new(
            ApiLimits {
                max_requests_per_user: 2,
                ..ApiLimits::DEFAULT
            },
            LimitMetrics::default(),
        );
        let a = budget.user_request("alice").expect("1");
        let _b = budget.user_request("alice").expect("2");
        assert_eq!(
            budget.user_request("alice").err(),
            Some(Shed::RequestsPerUser)
        );
        assert!(budget.user_request("bob").is_ok(), "another user");
        drop(a);
        assert!(budget.user_request("alice").is_ok());
    }
}
