//! The identities the local control plane knows, one static bearer token each.

/// Who a client acts as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Identity {
    /// Cluster administrator (`system:masters`).
    Admin,
    /// holdfast's controller service account.
    Controller,
    /// holdfast's webhook service account.
    Webhook,
    /// Kueue's controller service account.
    Kueue,
    /// Kubeflow Trainer's controller service account.
    Trainer,
    /// A plain namespace user, allowed to edit ConfigMaps, TrainJobs and Pods in test namespaces.
    User,
    /// kube-controller-manager (it mints its controllers' service-account tokens itself).
    ControllerManager,
}

impl Identity {
    pub const ALL: [Identity; 7] = [
        Identity::Admin,
        Identity::Controller,
        Identity::Webhook,
        Identity::Kueue,
        Identity::Trainer,
        Identity::User,
        Identity::ControllerManager,
    ];

    /// The user name the apiserver authenticates (what a webhook sees in `userInfo.username`).
    pub fn username(self) -> &'static str {
        match self {
            Identity::Admin => "holdfast-test-admin",
            Identity::Controller => "system:serviceaccount:holdfast-system:holdfast-controller",
            Identity::Webhook => "system:serviceaccount:holdfast-system:holdfast-webhook",
            Identity::Kueue => "system:serviceaccount:kueue-system:kueue-controller-manager",
            Identity::Trainer => {
                "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager"
            }
            Identity::User => "alice",
            Identity::ControllerManager => "system:kube-controller-manager",
        }
    }

    /// Groups, as a service account's token would carry them.
    pub fn groups(self) -> Vec<&'static str> {
        match self {
            Identity::Admin => vec!["system:masters", "system:authenticated"],
            Identity::Controller | Identity::Webhook => vec![
                "system:serviceaccounts",
                "system:serviceaccounts:holdfast-system",
                "system:authenticated",
            ],
            Identity::Kueue => vec![
                "system:serviceaccounts",
                "system:serviceaccounts:kueue-system",
                "system:authenticated",
            ],
            Identity::Trainer => vec![
                "system:serviceaccounts",
                "system:serviceaccounts:kubeflow-system",
                "system:authenticated",
            ],
            Identity::User => vec!["holdfast:test-users", "system:authenticated"],
            Identity::ControllerManager => vec!["system:authenticated"],
        }
    }

    /// Whether the identity is a static token of the apiserver's token file. holdfast's
    /// controller and webhook are not: they authenticate with TokenRequest tokens of the
    /// chart's ServiceAccounts, bound to exactly the chart's roles (`crate::rbac`).
    pub fn from_token_file(self) -> bool {
        !matches!(self, Identity::Controller | Identity::Webhook)
    }

    /// A short name for files.
    pub fn slug(self) -> &'static str {
        match self {
            Identity::Admin => "admin",
            Identity::Controller => "controller",
            Identity::Webhook => "webhook",
            Identity::Kueue => "kueue",
            Identity::Trainer => "trainer",
            Identity::User => "user",
            Identity::ControllerManager => "kcm",
        }
    }
}
