//! Finding the hold API without `--server`: the release's controller Service in the holdfast
//! namespace, a ready pod behind it (the Lease holder first), and a port-forward to the pod's
//! `https` port through the apiserver, with the user's own kube credentials — as `kubectl
//! port-forward` reaches a pod. The hold API's certificate is still verified, against
//! `--ca-file` or else the caBundle of the release's MutatingWebhookConfiguration (both
//! certificates come from one CA in every certificate mode of the chart); with neither, the
//! call is refused before the token is sent.

use std::net::SocketAddr;

use anyhow::{Context, anyhow, bail};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ListParams};

/// The labels every holdfast controller Service carries (the chart's `componentLabels`).
pub const CONTROLLER_SELECTOR: &str =
    "app.kubernetes.io/part-of=holdfast,app.kubernetes.io/component=controller";

/// The release's hold API, as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// The Service's namespace.
    pub namespace: String,
    /// The controller Service's name (`<fullname>-controller`, also the Lease's name).
    pub service: String,
    /// The host name the hold API's certificate names: `<service>.<namespace>.svc`.
    pub host: String,
    /// The Service's pod selector.
    pub selector: String,
    /// The chart release (`app.kubernetes.io/instance`).
    pub instance: String,
}

impl Release {
    /// The chart names the webhook configuration `<fullname>` and the Service
    /// `<fullname>-controller`.
    pub fn webhook_configuration(&self) -> &str {
        self.service
            .strip_suffix("-controller")
            .unwrap_or(&self.service)
    }
}

/// The one holdfast release among `services` (of `namespace`), or why there is none to use.
pub fn choose_release(
    namespace: &str,
    release: Option<&str>,
    services: &[Service],
) -> anyhow::Result<Release> {
    let instance_of = |s: &Service| {
        s.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app.kubernetes.io/instance"))
            .cloned()
    };
    let candidates: Vec<&Service> = services
        .iter()
        .filter(|s| release.is_none_or(|r| instance_of(s).as_deref() == Some(r)))
        .collect();
    let service = match candidates.as_slice() {
        [] => bail!(
            "no holdfast release in namespace {namespace}{}: pass --holdfast-namespace (HOLDFAST_NAMESPACE) \
             where the chart is installed, or --server",
            release.map(|r| format!(" named {r}")).unwrap_or_default()
        ),
        [one] => *one,
        many => {
            let names: Vec<String> = many.iter().filter_map(|s| instance_of(s)).collect();
            bail!(
                "{} holdfast releases in namespace {namespace} ({}): pass --release",
                many.len(),
                names.join(", ")
            )
        }
    };
    let name = service
        .metadata
        .name
        .clone()
        .ok_or_else(|| anyhow!("a Service without a name"))?;
    let selector = service
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .ok_or_else(|| anyhow!("Service {namespace}/{name} selects no pods"))?;
    let instance = instance_of(service).ok_or_else(|| {
        anyhow!("Service {namespace}/{name} names no release (app.kubernetes.io/instance)")
    })?;
    Ok(Release {
        instance,
        host: format!("{name}.{namespace}.svc"),
        namespace: namespace.to_owned(),
        service: name,
        selector,
    })
}

/// The pods to try, in order: ready and not being deleted, the Lease holder first (a
/// replica not holding the Lease answers 503), each with its container port named `https`.
pub fn pods_to_try(pods: &[Pod], holder: Option<&str>) -> Vec<(String, u16)> {
    let mut ready: Vec<(String, u16)> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && is_ready(p))
        .filter_map(|p| Some((p.metadata.name.clone()?, https_port(p)?)))
        .collect();
    ready.sort_by_key(|(name, _)| (Some(name.as_str()) != holder, name.clone()));
    ready
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn https_port(pod: &Pod) -> Option<u16> {
    pod.spec.as_ref()?.containers.iter().find_map(|c| {
        c.ports
            .as_ref()?
            .iter()
            .find(|p| p.name.as_deref() == Some("https"))
            .and_then(|p| u16::try_from(p.container_port).ok())
    })
}

/// The release in `namespace` (the one named `release`, if given).
pub async fn release(
    client: &kube::Client,
    namespace: &str,
    release: Option<&str>,
) -> anyhow::Result<Release> {
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let list = services
        .list(&ListParams::default().labels(CONTROLLER_SELECTOR))
        .await
        .with_context(|| format!("listing holdfast's Services in namespace {namespace}"))?;
    choose_release(namespace, release, &list.items)
}

/// The pods behind the release's Service, in the order to try them. The Lease is read only
/// to put its holder first: if it cannot be read, every ready pod is tried.
pub async fn pods(client: &kube::Client, release: &Release) -> anyhow::Result<Vec<(String, u16)>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &release.namespace);
    let list = pods
        .list(&ListParams::default().labels(&release.selector))
        .await
        .with_context(|| {
            format!(
                "listing the pods of Service {}/{}",
                release.namespace, release.service
            )
        })?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &release.namespace);
    let holder = leases
        .get_opt(&release.service)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity);
    let order = pods_to_try(&list.items, holder.as_deref());
    if order.is_empty() {
        bail!(
            "no ready pod behind Service {}/{} (is holdfast's controller running?)",
            release.namespace,
            release.service
        );
    }
    Ok(order)
}

/// The CA the hold API's certificate must chain to: the caBundle of the release's mutating
/// webhook configuration (present under every validation engine; the validating one may have
/// no webhook), if the user may read it — and only if that configuration is holdfast's, of
/// this release ([`release_ca`]). Else a Service squatting holdfast's labels in a namespace the
/// user was pointed at could name another configuration, whose CA signs for someone else:
/// another product's webhooks calling Services in that same namespace, say, whose CA key the
/// namespace's owner holds.
pub async fn ca_bundle(client: &kube::Client, release: &Release) -> anyhow::Result<Vec<u8>> {
    let name = release.webhook_configuration();
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let config = configs.get(name).await.with_context(|| {
        format!("reading MutatingWebhookConfiguration {name} for the hold API's CA")
    })?;
    let webhooks = config
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .map(|w| (w.name, w.client_config))
        .collect();
    release_ca(release, &config.metadata, webhooks)
}

/// The suffix of every mutating webhook the chart names (`jobs.mutate.holdfast.dev`, ...).
pub const WEBHOOK_NAME_SUFFIX: &str = ".mutate.holdfast.dev";

/// [`ca_bundle`]'s check and choice, on the configuration read (its metadata, and each
/// webhook's name and client configuration). The configuration is trusted only with
/// holdfast's own names throughout: named `<fullname>` (the release's Service less
/// `-controller`), labelled `app.kubernetes.io/part-of: holdfast`,
/// `app.kubernetes.io/component: webhook` and the release's `app.kubernetes.io/instance`, and
/// every webhook of it named `*.mutate.holdfast.dev` and calling the Service
/// `<fullname>-webhook` in the release namespace.
pub fn release_ca(
    release: &Release,
    metadata: &kube::api::ObjectMeta,
    webhooks: Vec<(String, WebhookClientConfig)>,
) -> anyhow::Result<Vec<u8>> {
    let name = metadata.name.clone().unwrap_or_default();
    let label = |key: &str| {
        metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(key))
            .map(String::as_str)
    };
    let fullname = release.webhook_configuration();
    let service = format!("{fullname}-webhook");
    let why = if name != fullname {
        Some(format!("it is not named {fullname}"))
    } else if label("app.kubernetes.io/instance") != Some(release.instance.as_str()) {
        Some(format!(
            "its app.kubernetes.io/instance is not {}",
            release.instance
        ))
    } else if label("app.kubernetes.io/part-of") != Some("holdfast")
        || label("app.kubernetes.io/component") != Some("webhook")
    {
        Some("it is not labelled part-of holdfast, component webhook".to_owned())
    } else if webhooks.is_empty() {
        Some("it has no webhook".to_owned())
    } else {
        webhooks.iter().find_map(|(hook, c)| {
            let calls_ours = c
                .service
                .as_ref()
                .is_some_and(|s| s.namespace == release.namespace && s.name == service);
            if !hook.ends_with(WEBHOOK_NAME_SUFFIX) {
                Some(format!(
                    "its webhook {hook} is not holdfast's (*{WEBHOOK_NAME_SUFFIX})"
                ))
            } else if !calls_ours {
                Some(format!(
                    "its webhook {hook} does not call Service {}/{service}",
                    release.namespace
                ))
            } else {
                None
            }
        })
    };
    if let Some(why) = why {
        bail!(
            "MutatingWebhookConfiguration {name} is not holdfast release {}'s in namespace {} ({why}): \
             its CA is not trusted",
            release.instance,
            release.namespace
        );
    }
    webhooks
        .into_iter()
        .find_map(|(_, c)| c.ca_bundle.map(|b| b.0))
        .filter(|b| !b.is_empty())
        .ok_or_else(|| anyhow!("MutatingWebhookConfiguration {name} has no caBundle yet"))
}

/// A local port whose every connection is a new port-forward to `pod`'s `port`. The task
/// ends with the program (the CLI makes one call).
pub async fn forward(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
    port: u16,
) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let local = listener.local_addr()?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = pod.to_owned();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let (pods, pod) = (pods.clone(), pod.clone());
            tokio::spawn(async move {
                match pods.portforward(&pod, &[port]).await {
                    Ok(mut forwarder) => {
                        if let Some(mut upstream) = forwarder.take_stream(port) {
                            let _ = tokio::io::copy_bidirectional(&mut tcp, &mut upstream).await;
                        }
                        forwarder.abort();
                    }
                    // Dropping the local connection makes the call fail to connect: the
                    // CLI reports nothing sent.
                    Err(e) => eprintln!("holdfast: port-forward to pod {pod}: {e}"),
                }
            });
        }
    });
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerPort, PodCondition, PodSpec, PodStatus, ServiceSpec,
    };
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;

    fn service(name: &str, instance: &str) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/instance".to_string(),
                    instance.to_string(),
                )])),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                selector: Some(BTreeMap::from([
                    (
                        "app.kubernetes.io/component".to_string(),
                        "controller".to_string(),
                    ),
                    (
                        "app.kubernetes.io/instance".to_string(),
                        instance.to_string(),
                    ),
                ])),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(name: &str, ready: bool, https: Option<i32>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "controller".into(),
                    ports: Some(
                        [Some(("metrics", 8081)), https.map(|p| ("https", p))]
                            .into_iter()
                            .flatten()
                            .map(|(n, p)| ContainerPort {
                                name: Some(n.into()),
                                container_port: p,
                                ..Default::default()
                            })
                            .collect(),
                    ),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn the_one_release_in_the_namespace_is_found_with_its_certificate_name_and_selector() {
        let r = choose_release("holdfast-system", None, &[service("hf-controller", "hf")])
            .expect("found");
        assert_eq!(r.host, "hf-controller.holdfast-system.svc");
        assert_eq!(
            r.selector,
            "app.kubernetes.io/component=controller,app.kubernetes.io/instance=hf"
        );
        assert_eq!(r.webhook_configuration(), "hf");
    }

    #[test]
    fn no_release_or_two_releases_is_an_error_that_says_what_to_pass() {
        let none = choose_release("ns", None, &[]).expect_err("none");
        assert!(none.to_string().contains("--holdfast-namespace"), "{none}");
        let two = [service("a-controller", "a"), service("b-controller", "b")];
        let many = choose_release("ns", None, &two).expect_err("two");
        assert!(many.to_string().contains("a, b") && many.to_string().contains("--release"));
        let b = choose_release("ns", Some("b"), &two).expect("named");
        assert_eq!(b.service, "b-controller");
        let missing = choose_release("ns", Some("c"), &two).expect_err("no c");
        assert!(missing.to_string().contains("named c"), "{missing}");
    }

    #[test]
    fn only_the_release_s_own_webhook_configuration_gives_the_ca() {
        use k8s_openapi::ByteString;
        use k8s_openapi::api::admissionregistration::v1::ServiceReference;
        let release = choose_release("hs", None, &[service("hf-controller", "hf")]).expect("found");
        let meta = |instance: &str| ObjectMeta {
            name: Some("hf".into()),
            labels: Some(BTreeMap::from([
                (
                    "app.kubernetes.io/instance".to_string(),
                    instance.to_string(),
                ),
                (
                    "app.kubernetes.io/part-of".to_string(),
                    "holdfast".to_string(),
                ),
                (
                    "app.kubernetes.io/component".to_string(),
                    "webhook".to_string(),
                ),
            ])),
            ..Default::default()
        };
        let clients = |service_ns: &str| {
            vec![(
                "jobs.mutate.holdfast.dev".to_string(),
                WebhookClientConfig {
                    ca_bundle: Some(ByteString(b"PEM".to_vec())),
                    service: Some(ServiceReference {
                        name: "hf-webhook".into(),
                        namespace: service_ns.into(),
                        ..Default::default()
                    }),
                    url: None,
                },
            )]
        };
        assert_eq!(
            release_ca(&release, &meta("hf"), clients("hs")).expect("ours"),
            b"PEM"
        );
        for (instance, ns) in [("other", "hs"), ("hf", "elsewhere")] {
            let refused = release_ca(&release, &meta(instance), clients(ns)).expect_err("not ours");
            assert!(refused.to_string().contains("not trusted"), "{refused}");
        }
        let none = release_ca(&release, &meta("hf"), vec![]).expect_err("no webhook");
        assert!(none.to_string().contains("not trusted"), "{none}");
    }

    #[test]
    fn another_products_webhook_configuration_in_the_release_namespace_gives_no_ca() {
        use k8s_openapi::ByteString;
        use k8s_openapi::api::admissionregistration::v1::ServiceReference;
        // A Service squatting holdfast's labels in the tenant's namespace, named after another
        // product's configuration, whose webhooks call Services in that same namespace.
        let release =
            choose_release("team-a", None, &[service("acme-controller", "acme")]).expect("found");
        let labels = |part_of: &str| ObjectMeta {
            name: Some("acme".into()),
            labels: Some(BTreeMap::from([
                ("app.kubernetes.io/instance".to_string(), "acme".to_string()),
                ("app.kubernetes.io/part-of".to_string(), part_of.to_string()),
                (
                    "app.kubernetes.io/component".to_string(),
                    "webhook".to_string(),
                ),
            ])),
            ..Default::default()
        };
        let hook = |name: &str, service: &str| {
            vec![(
                name.to_string(),
                WebhookClientConfig {
                    ca_bundle: Some(ByteString(b"TENANT CA".to_vec())),
                    service: Some(ServiceReference {
                        name: service.into(),
                        namespace: "team-a".into(),
                        ..Default::default()
                    }),
                    url: None,
                },
            )]
        };
        let cases = [
            (
                labels("acme"),
                hook("pods.acme.example", "acme-webhook"),
                "labelled",
            ),
            (
                labels("holdfast"),
                hook("pods.acme.example", "acme-webhook"),
                "is not holdfast's",
            ),
            (
                labels("holdfast"),
                hook("jobs.mutate.holdfast.dev", "acme-injector"),
                "does not call Service team-a/acme-webhook",
            ),
        ];
        for (meta, webhooks, why) in cases {
            let refused = release_ca(&release, &meta, webhooks).expect_err("not holdfast's");
            let text = refused.to_string();
            assert!(text.contains("not trusted") && text.contains(why), "{text}");
        }
        let mut renamed = labels("holdfast");
        renamed.name = Some("other".into());
        let refused = release_ca(
            &release,
            &renamed,
            hook("jobs.mutate.holdfast.dev", "acme-webhook"),
        )
        .expect_err("another name");
        assert!(refused.to_string().contains("not named acme"), "{refused}");
    }

    #[test]
    fn ready_pods_with_an_https_port_are_tried_the_lease_holder_first() {
        let pods = [
            pod("a", true, Some(8443)),
            pod("b", true, Some(8443)),
            pod("c", false, Some(8443)),
            pod("d", true, None),
        ];
        assert_eq!(
            pods_to_try(&pods, Some("b")),
            vec![("b".into(), 8443), ("a".into(), 8443)]
        );
        assert_eq!(
            pods_to_try(&pods, None),
            vec![("a".into(), 8443), ("b".into(), 8443)]
        );
        let mut leaving = pod("e", true, Some(8443));
        leaving.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        assert!(pods_to_try(&[leaving], Some("e")).is_empty());
    }
}
