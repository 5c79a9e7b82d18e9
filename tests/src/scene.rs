//! A test's world, the fixture a topic's tests start from: the topic's control plane, a
//! namespace of the test's own and the admin's client. A topic's support module adds the
//! steps its scenarios are told in as methods (`hold_support`: a managed TrainJob, the
//! plain-mode executor), so that a test body reads as its scenario.

use crate::{ControlPlane, Identity};
use std::future::Future;

pub struct Scene {
    /// The calling topic's control plane ([`ControlPlane::shared`]).
    pub cp: &'static ControlPlane,
    /// A namespace of this test's own.
    pub ns: String,
    /// The cluster admin's client.
    pub admin: kube::Client,
}

impl Scene {
    /// The scene of a test in the calling file's topic, in a new namespace named after
    /// `prefix`. Not an `async fn`, so that the control plane is the caller's topic's
    /// (`#[track_caller]` reaches [`ControlPlane::shared`] before the first await).
    #[track_caller]
    pub fn new(prefix: &str) -> impl Future<Output = Scene> + '_ {
        let cp = ControlPlane::shared();
        async move {
            let ns = cp.namespace(prefix).await.expect("namespace");
            let admin = cp.client(Identity::Admin).await.expect("admin client");
            Scene { cp, ns, admin }
        }
    }

    /// A client of `who`'s.
    pub async fn client(&self, who: Identity) -> kube::Client {
        self.cp.client(who).await.expect("client")
    }
}
