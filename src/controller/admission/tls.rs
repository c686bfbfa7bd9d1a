//! The webhook's certificate: from a directory cert-manager keeps (re-read
//! every minute, so a renewal is served without a restart), or made once by
//! the operator, kept in a Secret every replica reads, and its CA kept in
//! the webhook configuration's caBundle (written again if an upgrade of the
//! chart empties it).

use std::{
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
    time::Duration,
};

use k8s_openapi::{api::core::v1::Secret, ByteString};
use kube::{
    api::{Api, Patch, PatchParams, PostParams},
    Client,
};
use rustls::{
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
    ServerConfig,
};
use serde_json::json;
use tracing::{info, warn};

use super::TlsSource;

/// How often the certificate files or the caBundle are looked at again.
const RECHECK: Duration = Duration::from_secs(60);
/// A certificate made here lasts ten years: nothing rotates it but a new Secret.
const VALIDITY_DAYS: i64 = 3650;

/// A serving certificate, its key and the CA that signed it, as PEM.
struct Pem {
    cert: Vec<u8>,
    key: Vec<u8>,
    ca: Vec<u8>,
}

/// Serves the certificate in force; swapped when the files change.
#[derive(Debug)]
struct Current(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone())
    }
}

pub(super) async fn server_config(client: &Client, source: &TlsSource) -> Result<Arc<ServerConfig>, String> {
    let (cert, key) = match source {
        TlsSource::Dir(dir) => read_dir(dir)?,
        TlsSource::SelfSigned { namespace, secret, service, webhook } => {
            let pem = self_signed(client, namespace, secret, service, webhook.as_deref()).await?;
            if let Some(webhook) = webhook.clone() {
                tokio::spawn(keep_ca_bundle(client.clone(), webhook, pem.ca));
            }
            (pem.cert, pem.key)
        }
    };
    let current = Arc::new(Current(RwLock::new(certified(&cert, &key)?)));
    if let TlsSource::Dir(dir) = source {
        tokio::spawn(reread(dir.clone(), current.clone(), (cert, key)));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(current);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn read_dir(dir: &Path) -> Result<(Vec<u8>, Vec<u8>), String> {
    let read = |name: &str| std::fs::read(dir.join(name)).map_err(|e| format!("{}: {e}", dir.join(name).display()));
    Ok((read("tls.crt")?, read("tls.key")?))
}

fn certified(cert_pem: &[u8], key_pem: &[u8]) -> Result<Arc<CertifiedKey>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tls.crt: not PEM certificates: {e}"))?;
    if certs.is_empty() {
        return Err("tls.crt holds no certificate".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("tls.key: not a PEM private key: {e}"))?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| format!("tls.key: {e}"))?;
    Ok(Arc::new(CertifiedKey::new(certs, signer)))
}

async fn reread(dir: PathBuf, current: Arc<Current>, mut last: (Vec<u8>, Vec<u8>)) {
    loop {
        tokio::time::sleep(RECHECK).await;
        match read_dir(&dir) {
            Ok(now) if now != last => match certified(&now.0, &now.1) {
                Ok(key) => {
                    *current.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = key;
                    info!(dir = %dir.display(), "the admission webhook serves a renewed certificate");
                    last = now;
                }
                Err(e) => warn!(error = %e, "a renewed webhook certificate is unreadable; the old one is served"),
            },
            Ok(_) => {}
            Err(e) => warn!(error = %e, "the webhook certificate could not be read again"),
        }
    }
}

/// The certificate and key in the Secret, made (with a CA) if it does not exist yet.
async fn self_signed(
    client: &Client,
    namespace: &str,
    name: &str,
    service: &str,
    webhook: Option<&str>,
) -> Result<Pem, String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for _ in 0..3 {
        match secrets.get_opt(name).await.map_err(|e| format!("read Secret {namespace}/{name}: {e}"))? {
            Some(secret) => return from_secret(&secret),
            None => {
                let pem = make(service, namespace)?;
                let data = [("tls.crt", &pem.cert), ("tls.key", &pem.key), ("ca.crt", &pem.ca)]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.clone())))
                    .collect();
                let secret = Secret {
                    metadata: kube::api::ObjectMeta {
                        name: Some(name.into()),
                        // Owned by the webhook configuration: uninstalling the chart removes it too.
                        owner_references: owner(client, webhook).await.map(|o| vec![o]),
                        labels: Some(
                            [(crate::crd::MANAGED_BY_LABEL.to_string(), crate::crd::MANAGED_BY_VALUE.to_string())]
                                .into(),
                        ),
                        ..Default::default()
                    },
                    type_: Some("kubernetes.io/tls".into()),
                    data: Some(data),
                    ..Default::default()
                };
                match secrets.create(&PostParams::default(), &secret).await {
                    Ok(_) => {
                        info!(secret = %format!("{namespace}/{name}"), "made the admission webhook's certificate");
                        return Ok(pem);
                    }
                    // Another replica made it first: read theirs.
                    Err(kube::Error::Api(e)) if e.code == 409 => continue,
                    Err(e) => return Err(format!("create Secret {namespace}/{name}: {e}")),
                }
            }
        }
    }
    Err(format!("Secret {namespace}/{name} could not be read or made"))
}

fn from_secret(secret: &Secret) -> Result<Pem, String> {
    let field = |k: &str| {
        secret.data.as_ref().and_then(|d| d.get(k)).map(|b| b.0.clone()).ok_or_else(|| format!("the Secret has no {k}"))
    };
    Ok(Pem { cert: field("tls.crt")?, key: field("tls.key")?, ca: field("ca.crt")? })
}

/// A CA and a serving certificate for the Service's DNS names, as PEM.
fn make(service: &str, namespace: &str) -> Result<Pem, String> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    let e = |e: rcgen::Error| e.to_string();
    // From yesterday (for clocks a little behind) for VALIDITY_DAYS.
    let today = jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC).date();
    let start = today.yesterday().unwrap_or(today);
    let end = start.checked_add(jiff::Span::new().days(VALIDITY_DAYS)).unwrap_or(start);
    let ymd = |d: jiff::civil::Date| {
        rcgen::date_time_ymd(
            i32::from(d.year()),
            u8::try_from(d.month()).unwrap_or(1),
            u8::try_from(d.day()).unwrap_or(1),
        )
    };
    let now = (ymd(start), ymd(end));
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(e)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.distinguished_name.push(DnType::CommonName, "bulkhead admission webhook CA");
    ca.not_before = now.0;
    ca.not_after = now.1;
    let ca_key = KeyPair::generate().map_err(e)?;
    let ca_cert = ca.self_signed(&ca_key).map_err(e)?;
    let names = vec![service.to_string(), format!("{service}.{namespace}"), format!("{service}.{namespace}.svc")];
    let mut leaf = CertificateParams::new(names.clone()).map_err(e)?;
    leaf.distinguished_name.push(DnType::CommonName, format!("{service}.{namespace}.svc"));
    leaf.not_before = now.0;
    leaf.not_after = now.1;
    let leaf_key = KeyPair::generate().map_err(e)?;
    let issuer = Issuer::new(ca, ca_key);
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).map_err(e)?;
    Ok(Pem {
        cert: leaf_cert.pem().into_bytes(),
        key: leaf_key.serialize_pem().into_bytes(),
        ca: ca_cert.pem().into_bytes(),
    })
}

/// The webhook configuration as an owner (None if it cannot be read).
async fn owner(
    client: &Client,
    webhook: Option<&str>,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let config = api.get_opt(webhook?).await.ok()??;
    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: "ValidatingWebhookConfiguration".into(),
        name: config.metadata.name?,
        uid: config.metadata.uid?,
        ..Default::default()
    })
}

/// Keep `ca` in every webhook of the configuration (a chart upgrade writes it without one).
async fn keep_ca_bundle(client: Client, webhook: String, ca: Vec<u8>) {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client);
    loop {
        match api.get_opt(&webhook).await {
            Ok(Some(config)) => {
                let stale: Vec<String> = config
                    .webhooks
                    .iter()
                    .flatten()
                    .filter(|w| w.client_config.ca_bundle.as_ref().map(|b| &b.0) != Some(&ca))
                    .map(|w| w.name.clone())
                    .collect();
                if !stale.is_empty() {
                    let bundle = ByteString(ca.clone());
                    let webhooks: Vec<_> =
                        stale.iter().map(|name| json!({"name": name, "clientConfig": {"caBundle": bundle}})).collect();
                    let patch = json!({"webhooks": webhooks});
                    match api.patch(&webhook, &PatchParams::default(), &Patch::Strategic(&patch)).await {
                        Ok(_) => info!(%webhook, webhooks = ?stale, "wrote the webhook's CA into its configuration"),
                        Err(e) => warn!(%webhook, error = %e, "could not write the webhook's CA"),
                    }
                }
            }
            Ok(None) => {}
            Err(e) => warn!(%webhook, error = %e, "could not read the webhook configuration"),
        }
        tokio::time::sleep(RECHECK).await;
    }
}
