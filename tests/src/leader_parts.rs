//! The controller's leader parts (the snapshot reconciler, the readmission gate) as the tests
//! start them, with what the binary's wiring hands them: a feed of a TrainJob watch and an
//! Event publisher.

use holdfast_controller::events::{EventMetrics, Publisher, PublisherConfig};
use holdfast_controller::trainjob::{Feed, Watch};
use tokio_util::sync::CancellationToken;

/// An Event publisher as the controller starts one, reporting as `holdfast-controller` and,
/// when given, as `instance`.
pub fn publisher(client: &kube::Client, instance: Option<String>) -> Publisher {
    Publisher::start(
        client.clone(),
        PublisherConfig {
            instance,
            ..PublisherConfig::default()
        },
        EventMetrics::default(),
    )
}

/// A feed of a TrainJob watch of `namespace` (every namespace when `None`), the watch running
/// until `stop` is cancelled or the feed is dropped.
pub fn trainjob_feed(
    client: &kube::Client,
    namespace: Option<&str>,
    stop: &CancellationToken,
) -> Feed {
    let mut watch = Watch::new(client.clone(), namespace);
    let feed = watch.subscribe();
    tokio::spawn(watch.run(stop.clone()));
    feed
}
