//! Where the audit's Service backends come from. `discovery.k8s.io/v1`
//! EndpointSlices are GA since 1.21 and core/v1 Endpoints is deprecated from
//! 1.33 (KEP-4974): slices wherever the API server serves them, Endpoints
//! only where it does not (1.20 serves `discovery.k8s.io/v1beta1` only).

use kube::Client;

/// The group version asked for: its resource list says whether slices are served.
pub(in crate::controller) const SLICES_GROUP_VERSION: &str = "discovery.k8s.io/v1";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::controller) enum BackendSource {
    EndpointSlices,
    Endpoints,
}

/// Asks the API server once. A 404 (the group version is unknown) means
/// Endpoints; any other failure is returned, to be retried: falling back on
/// a transient error would keep a deprecated watch for the process's life.
pub(in crate::controller) async fn discover(client: &Client) -> Result<BackendSource, kube::Error> {
    match client.list_api_group_resources(SLICES_GROUP_VERSION).await {
        Ok(list) if list.resources.iter().any(|r| r.name == "endpointslices") => Ok(BackendSource::EndpointSlices),
        Ok(_) => Ok(BackendSource::Endpoints),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(BackendSource::Endpoints),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use http::{Request, Response};
    use kube::client::Body;
    use serde_json::json;
    use tower_test::mock;

    use super::*;

    /// Runs `discover` against a mock that answers its one request.
    async fn discover_with(status: u16, body: Vec<u8>) -> Result<BackendSource, kube::Error> {
        let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let serve = tokio::spawn(async move {
            let (request, send) = handle.next_request().await.expect("discovery asks once");
            assert_eq!(request.method(), "GET");
            assert_eq!(request.uri().path(), "/apis/discovery.k8s.io/v1");
            send.send_response(Response::builder().status(status).body(Body::from(body)).expect("a response"));
        });
        let decided = discover(&client).await;
        serve.await.expect("the mock served");
        decided
    }

    fn resource_list(names: &[&str]) -> Vec<u8> {
        let resources: Vec<_> = names
            .iter()
            .map(|n| json!({"name": n, "singularName": "", "namespaced": true, "kind": "EndpointSlice", "verbs": ["list", "watch"]}))
            .collect();
        let list = json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": SLICES_GROUP_VERSION, "resources": resources});
        serde_json::to_vec(&list).expect("json")
    }

    #[tokio::test]
    async fn slices_where_the_server_serves_them() {
        let got = discover_with(200, resource_list(&["endpointslices"])).await.expect("decided");
        assert_eq!(got, BackendSource::EndpointSlices);
    }

    #[tokio::test]
    async fn endpoints_where_the_group_version_is_unknown() {
        // What 1.20 answers: a plain-text 404 (it serves v1beta1 only).
        let got = discover_with(404, b"404 page not found\n".to_vec()).await.expect("decided");
        assert_eq!(got, BackendSource::Endpoints);
    }

    #[tokio::test]
    async fn endpoints_where_the_group_version_lacks_slices() {
        let got = discover_with(200, resource_list(&[])).await.expect("decided");
        assert_eq!(got, BackendSource::Endpoints);
    }

    #[tokio::test]
    async fn a_server_error_is_no_answer() {
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 503, "reason": "ServiceUnavailable", "message": "starting"});
        let got = discover_with(503, serde_json::to_vec(&status).expect("json")).await;
        assert!(matches!(got, Err(kube::Error::Api(ref s)) if s.code == 503), "{got:?}");
    }
}
