//! Isolation at admission: a validating webhook served by the operator's
//! own process, in every replica (a standby answers too: the decision reads
//! only the watched Bulkheads and the snapshot). It refuses a pod that
//! reaches a class's dedicated nodes without being one of its pods
//! (`plan::review_pod`), and an edit by anyone else of a ConfigMap or
//! ResourceQuota the operator owns. TLS comes from a directory (cert-manager)
//! or from a Secret it makes itself once, whose CA it keeps in the
//! ValidatingWebhookConfiguration's caBundle.

mod review;
mod server;
mod tls;

use std::{net::SocketAddr, path::PathBuf, sync::Arc};

use futures::StreamExt;
use kube::{
    api::Api,
    core::DeserializeGuard,
    runtime::{reflector, watcher, WatchStreamExt},
    Client,
};
use tracing::{info, warn};

use crate::controller::watch::observe::SharedSnapshot;
use crate::crd::Bulkhead;

/// Where the webhook's certificate comes from.
#[derive(Clone, Debug)]
pub enum TlsSource {
    /// `tls.crt` and `tls.key` in a directory (a cert-manager Secret, mounted); re-read every minute.
    Dir(PathBuf),
    /// Made once by the operator and kept in Secret `name` of `namespace`; valid for
    /// `service.namespace.svc`; its CA is written into webhook configuration `webhook`.
    SelfSigned { namespace: String, secret: String, service: String, webhook: Option<String> },
}

/// The webhook's configuration (`bulkhead run --admission-*`).
#[derive(Clone, Debug)]
pub struct AdmissionOptions {
    pub listen: SocketAddr,
    pub tls: TlsSource,
    /// Namespaces whose pods are not reviewed (node agents that tolerate every taint).
    pub exempt_namespaces: Vec<String>,
    /// The operator's own user (system:serviceaccount:NS:NAME): the one writer of what it owns.
    pub operator_user: Option<String>,
}

/// What every review reads.
pub(super) struct State {
    pub bulkheads: reflector::Store<DeserializeGuard<Bulkhead>>,
    pub snapshot: Arc<SharedSnapshot>,
    pub options: AdmissionOptions,
}

/// Start the webhook: the Bulkheads' watch and the HTTPS server, until the process stops.
pub(super) fn spawn(client: Client, snapshot: Arc<SharedSnapshot>, selector: String, options: AdmissionOptions) {
    let (reader, writer) = reflector::store();
    let api: Api<DeserializeGuard<Bulkhead>> = Api::all(client.clone());
    let events =
        reflector::reflector(writer, watcher(api, watcher::Config::default().labels(&selector)).default_backoff());
    tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            if let Err(e) = event {
                warn!(error = %e, "the admission webhook's watch of Bulkheads failed; retrying");
            }
        }
    });
    let state = Arc::new(State { bulkheads: reader, snapshot, options: options.clone() });
    tokio::spawn(async move {
        let config = match tls::server_config(&client, &options.tls).await {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "the admission webhook has no certificate: it does not serve, and the API server applies its failurePolicy");
                return;
            }
        };
        info!(addr = %options.listen, "serving the admission webhook");
        if let Err(e) = server::serve(options.listen, config, state).await {
            warn!(error = %e, "the admission webhook stopped");
        }
    });
}
