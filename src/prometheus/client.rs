//! A small client of Prometheus's HTTP API (`/api/v1/query`,
//! `/api/v1/query_range`) on hyper: plain http, or https with rustls (the
//! TLS stack kube already brings) against the system's CAs or a CA file.
//! Credentials go in an `Authorization` header, never in the request line:
//! `user:password@` of the URL as Basic, or a bearer token read from a file
//! for every request (a projected service-account token rotates). No error
//! prints them. Every wait is bounded (connect, TLS handshake and the whole
//! exchange) and so is the size of an answer.

use std::{collections::BTreeMap, path::PathBuf, sync::Arc, time::Duration};

use bytes::Bytes;
use http::{header, HeaderValue, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite};

use super::error::PrometheusError;

/// The largest answer read (a week of 64 classes at 1,000 steps is ~10 MiB).
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A token file larger than this is not a token (a projected one is ~1 KiB).
const MAX_TOKEN_BYTES: u64 = 64 << 10;

/// Labels of one series.
pub type Labels = BTreeMap<String, String>;

/// One series of an instant query.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub labels: Labels,
    pub value: f64,
}

/// One series of a range query: (unix seconds, value).
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub labels: Labels,
    pub points: Vec<(f64, f64)>,
}

/// How to reach a Prometheus beyond its URL.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientOptions {
    /// PEM file of the CAs that sign Prometheus's certificate, used instead
    /// of the system's (https only).
    pub ca_file: Option<PathBuf>,
    /// A file holding a bearer token, read again for every request (e.g.
    /// /var/run/secrets/kubernetes.io/serviceaccount/token).
    pub bearer_token_file: Option<PathBuf>,
}

#[derive(Clone)]
enum Credentials {
    None,
    /// `Basic base64(user:password)`, marked sensitive.
    Basic(HeaderValue),
    BearerFile(PathBuf),
}

#[derive(Clone)]
pub struct PrometheusClient {
    /// scheme://host[:port][/prefix], never with the user info: this is what errors print.
    base: String,
    /// The path prefix (`--web.route-prefix`), without a trailing slash.
    prefix: String,
    /// host:port to connect to (an IPv6 host in brackets).
    connect_to: String,
    /// The Host header: host[:port] as the URL wrote it.
    host: String,
    tls: Option<(tokio_rustls::TlsConnector, rustls::pki_types::ServerName<'static>)>,
    credentials: Credentials,
    timeout: Duration,
}

impl std::fmt::Debug for PrometheusClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let credentials = match &self.credentials {
            Credentials::None => "none".to_string(),
            Credentials::Basic(_) => "basic (redacted)".to_string(),
            Credentials::BearerFile(path) => format!("bearer token from {}", path.display()),
        };
        f.debug_struct("PrometheusClient")
            .field("base", &self.base)
            .field("tls", &self.tls.is_some())
            .field("credentials", &credentials)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl PrometheusClient {
    /// `base_url`: http(s)://[user:password@]host[:port], optionally with a
    /// path prefix (`--web.route-prefix`); https against the system's CAs.
    pub fn new(base_url: &str) -> Result<Self, PrometheusError> {
        Self::with_options(base_url, &ClientOptions::default())
    }

    pub fn with_options(base_url: &str, options: &ClientOptions) -> Result<Self, PrometheusError> {
        let invalid = |reason: &str| PrometheusError::InvalidUrl { url: redacted(base_url), reason: reason.to_owned() };
        let uri: Uri = base_url.parse().map_err(|_| invalid("not a URL"))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(invalid("must start with http:// or https://")),
        };
        let authority = uri.authority().ok_or_else(|| invalid("no host"))?;
        if uri.query().is_some() {
            return Err(invalid("must not carry a query"));
        }
        let (userinfo, host_port) = match authority.as_str().rsplit_once('@') {
            Some((userinfo, host_port)) => (Some(userinfo), host_port),
            None => (None, authority.as_str()),
        };
        let (host, port) = split_port(host_port).map_err(|reason| invalid(&reason))?;
        if host.is_empty() || host == "[]" {
            return Err(invalid("no host"));
        }
        let port = port.unwrap_or(if https { 443 } else { 80 });
        let credentials = match (userinfo, &options.bearer_token_file) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "user info in the URL and a bearer token file both set the Authorization header: give one",
                ))
            }
            (Some(userinfo), None) => Credentials::Basic(basic(userinfo).map_err(|reason| invalid(&reason))?),
            (None, Some(path)) => Credentials::BearerFile(path.clone()),
            (None, None) => Credentials::None,
        };
        if options.ca_file.is_some() && !https {
            return Err(invalid("a CA file is given, but the URL is plain http://"));
        }
        let tls = if https {
            let name = rustls::pki_types::ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']'))
                .map_err(|_| invalid("the host is not a valid TLS server name"))?
                .to_owned();
            Some((tls_connector(options.ca_file.as_ref())?, name))
        } else {
            None
        };
        let scheme = if https { "https" } else { "http" };
        Ok(PrometheusClient {
            base: format!("{scheme}://{host_port}{}", uri.path().trim_end_matches('/')),
            prefix: uri.path().trim_end_matches('/').to_owned(),
            connect_to: format!("{host}:{port}"),
            host: host_port.to_owned(),
            tls,
            credentials,
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// Bound each exchange (connect, query, answer) by `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// An instant query evaluated at `time` (unix seconds).
    pub async fn query(&self, promql: &str, time: f64) -> Result<Vec<Sample>, PrometheusError> {
        let params = [("query", promql.to_owned()), ("time", seconds(time))];
        let data = self.get("/api/v1/query", &params, promql).await?;
        match data {
            Data::Vector(v) => {
                Ok(v.into_iter().filter_map(|r| Some(Sample { labels: r.metric, value: r.value.value()? })).collect())
            }
            Data::Scalar(p) => Ok(p.value().map(|value| Sample { labels: Labels::new(), value }).into_iter().collect()),
            Data::Matrix(_) | Data::String(_) => Err(wrong_type(promql, "vector")),
        }
    }

    /// A range query from `start` to `end` (unix seconds) every `step` seconds.
    pub async fn query_range(
        &self,
        promql: &str,
        start: f64,
        end: f64,
        step: f64,
    ) -> Result<Vec<Series>, PrometheusError> {
        let params =
            [("query", promql.to_owned()), ("start", seconds(start)), ("end", seconds(end)), ("step", seconds(step))];
        match self.get("/api/v1/query_range", &params, promql).await? {
            Data::Matrix(m) => Ok(m
                .into_iter()
                .map(|r| Series {
                    labels: r.metric,
                    points: r.values.iter().filter_map(|p| Some((p.0, p.value()?))).collect(),
                })
                .collect()),
            _ => Err(wrong_type(promql, "matrix")),
        }
    }

    async fn get(&self, path: &str, params: &[(&str, String)], promql: &str) -> Result<Data, PrometheusError> {
        let query = form_urlencoded::Serializer::new(String::new()).extend_pairs(params).finish();
        // Origin form: the request line carries the path and query only.
        let uri = format!("{}{path}?{query}", self.prefix);
        let seconds = self.timeout.as_secs();
        let Response { status, content_type, body } =
            tokio::time::timeout(self.timeout, self.exchange(&uri))
                .await
                .map_err(|_| PrometheusError::Timeout { url: self.base.clone(), seconds })??;
        let excerpt = || {
            let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
            text.split_whitespace().collect::<Vec<_>>().join(" ")
        };
        let content_type = if content_type.is_empty() { "no content type".to_string() } else { content_type };
        let answer: Answer = match serde_json::from_slice(&body) {
            Ok(a) => a,
            Err(_) if !status.is_success() => {
                return Err(PrometheusError::Status {
                    url: self.base.clone(),
                    status: status.as_u16(),
                    content_type,
                    body: excerpt(),
                });
            }
            Err(source) => {
                return Err(PrometheusError::NotTheApi {
                    url: self.base.clone(),
                    status: status.as_u16(),
                    content_type,
                    body: excerpt(),
                    source,
                })
            }
        };
        match answer {
            Answer { status, data: Some(data), .. } if status == "success" => Ok(data),
            Answer { error_type, error, .. } => Err(PrometheusError::Query {
                error_type: error_type.unwrap_or_else(|| format!("HTTP {}", status.as_u16())),
                error: error.unwrap_or_default(),
                query: promql.to_owned(),
            }),
        }
    }

    async fn exchange(&self, uri: &str) -> Result<Response, PrometheusError> {
        let unreachable = |source| PrometheusError::Unreachable { url: self.base.clone(), source };
        let mut request = Request::get(uri)
            .header(header::HOST, &self.host)
            .header(header::ACCEPT, "application/json")
            .body(Empty::<Bytes>::new())
            .map_err(|_| PrometheusError::InvalidUrl {
                url: self.base.clone(),
                reason: "not a valid request URI".into(),
            })?;
        if let Some(value) = self.authorization().await? {
            request.headers_mut().insert(header::AUTHORIZATION, value);
        }
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(&self.connect_to))
            .await
            .map_err(|_| unreachable(std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")))?
            .map_err(unreachable)?;
        match &self.tls {
            None => self.send(stream, request).await,
            Some((connector, name)) => {
                let tls = tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(name.clone(), stream))
                    .await
                    .map_err(|_| PrometheusError::Tls {
                        url: self.base.clone(),
                        source: std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out"),
                    })?
                    .map_err(|source| PrometheusError::Tls { url: self.base.clone(), source })?;
                self.send(tls, request).await
            }
        }
    }

    async fn send<S>(&self, stream: S, request: Request<Empty<Bytes>>) -> Result<Response, PrometheusError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let http = |source| PrometheusError::Http { url: self.base.clone(), source };
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(http)?;
        // The connection is driven until the answer is read; dropped with it.
        let driver = tokio::spawn(conn);
        let response = sender.send_request(request).await.map_err(http)?;
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        let body = Limited::new(response.into_body(), MAX_RESPONSE_BYTES).collect().await.map_err(|e| {
            match e.downcast::<hyper::Error>() {
                Ok(e) => http(*e),
                Err(_) => PrometheusError::TooLarge { limit: MAX_RESPONSE_BYTES },
            }
        })?;
        driver.abort();
        Ok(Response { status, content_type, body: body.to_bytes() })
    }

    /// The Authorization header, if any: the token file is read now, so a
    /// rotated token is used from the next request on.
    async fn authorization(&self) -> Result<Option<HeaderValue>, PrometheusError> {
        match &self.credentials {
            Credentials::None => Ok(None),
            Credentials::Basic(value) => Ok(Some(value.clone())),
            Credentials::BearerFile(path) => {
                let token_error = |reason: String| PrometheusError::TokenFile { path: path.clone(), reason };
                let read = {
                    let path = path.clone();
                    tokio::task::spawn_blocking(move || {
                        use std::io::Read as _;
                        let mut text = String::new();
                        std::fs::File::open(&path)?.take(MAX_TOKEN_BYTES + 1).read_to_string(&mut text)?;
                        Ok::<_, std::io::Error>(text)
                    })
                };
                let text =
                    read.await.map_err(|e| token_error(e.to_string()))?.map_err(|e| token_error(e.to_string()))?;
                if text.len() as u64 > MAX_TOKEN_BYTES {
                    return Err(token_error(format!("larger than {MAX_TOKEN_BYTES} bytes")));
                }
                let token = text.trim();
                if token.is_empty() {
                    return Err(token_error("empty".into()));
                }
                let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| token_error("holds characters a header cannot carry".into()))?;
                value.set_sensitive(true);
                Ok(Some(value))
            }
        }
    }
}

/// One answer: its status, content type and body.
struct Response {
    status: StatusCode,
    content_type: String,
    body: Bytes,
}

/// A URL as errors may print it: any user info replaced by `***`.
pub(crate) fn redacted(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((_, host)) => format!("***@{host}"),
        None => authority.to_owned(),
    };
    match scheme {
        Some(scheme) => format!("{scheme}://{authority}{path}"),
        None => format!("{authority}{path}"),
    }
}

/// host and port of `host[:port]` (`[v6]:port` too); a port must be 1 to 65535.
fn split_port(host_port: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = if host_port.starts_with('[') {
        match host_port.find(']') {
            Some(end) => match &host_port[end + 1..] {
                "" => (host_port, None),
                rest => match rest.strip_prefix(':') {
                    Some(port) => (&host_port[..=end], Some(port)),
                    None => return Err("junk after the IPv6 address".into()),
                },
            },
            None => return Err("an unclosed [".into()),
        }
    } else {
        match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    match port {
        None => Ok((host, None)),
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => Ok((host, Some(n))),
            _ => Err(format!("port {p:?} is not a port (1 to 65535)")),
        },
    }
}

/// `Basic base64(user:password)` from the URL's percent-encoded user info.
fn basic(userinfo: &str) -> Result<HeaderValue, String> {
    use base64::Engine as _;
    let decode = |part: &str| {
        percent_encoding::percent_decode_str(part)
            .decode_utf8()
            .map(|s| s.into_owned())
            .map_err(|_| "the user info is not UTF-8 once percent-decoded".to_string())
    };
    let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    let pair = format!("{}:{}", decode(user)?, decode(password)?);
    let mut value = HeaderValue::from_str(&format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair)))
        .map_err(|_| "the user info cannot go into a header".to_string())?;
    value.set_sensitive(true);
    Ok(value)
}

/// rustls (ring) trusting `ca_file`, or the system's CAs without one.
fn tls_connector(ca_file: Option<&PathBuf>) -> Result<tokio_rustls::TlsConnector, PrometheusError> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let ca_error = |reason: String| PrometheusError::CaFile { path: path.clone(), reason };
            let pem = std::fs::read(path).map_err(|e| ca_error(e.to_string()))?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| ca_error(format!("not PEM certificates: {e}")))?;
                roots.add(cert).map_err(|e| ca_error(format!("a certificate rustls refuses: {e}")))?;
            }
            if roots.is_empty() {
                return Err(ca_error("holds no certificate".into()));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(PrometheusError::NoSystemCas);
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| PrometheusError::TlsSetup(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

fn seconds(t: f64) -> String {
    format!("{t:.3}")
}

fn wrong_type(query: &str, wanted: &str) -> PrometheusError {
    PrometheusError::Query {
        error_type: "unexpected result".into(),
        error: format!("expected a {wanted}"),
        query: query.into(),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    status: String,
    data: Option<Data>,
    error_type: Option<String>,
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "resultType", content = "result", rename_all = "camelCase")]
enum Data {
    Vector(Vec<VectorResult>),
    Matrix(Vec<MatrixResult>),
    Scalar(Point),
    String(serde::de::IgnoredAny),
}

#[derive(Deserialize)]
struct VectorResult {
    #[serde(default)]
    metric: Labels,
    value: Point,
}

#[derive(Deserialize)]
struct MatrixResult {
    #[serde(default)]
    metric: Labels,
    values: Vec<Point>,
}

/// `[unix seconds, "value"]`; the value is a string so that NaN and ±Inf survive JSON.
#[derive(Deserialize)]
struct Point(f64, String);

impl Point {
    fn value(&self) -> Option<f64> {
        self.1.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_read_with_their_port_checked_and_their_credentials_kept_out_of_the_base() {
        let client = |url: &str| PrometheusClient::new(url).expect(url);
        assert_eq!(client("http://127.0.0.1:9090/").base_url(), "http://127.0.0.1:9090");
        assert_eq!(client("http://prom/prefix").connect_to, "prom:80");
        assert_eq!(client("http://prom/prefix/").prefix, "/prefix");
        assert_eq!(client("https://prom").connect_to, "prom:443");
        assert_eq!(client("http://[::1]:9090").connect_to, "[::1]:9090");
        let with_user = client("https://alice:s%40cret@prom:8443/p");
        assert_eq!((with_user.base_url(), with_user.host.as_str()), ("https://prom:8443/p", "prom:8443"));
        assert!(!format!("{with_user:?}").contains("cret"), "{with_user:?}");
        let Credentials::Basic(value) = &with_user.credentials else { panic!("basic credentials") };
        // base64("alice:s@cret"): the user info is percent-decoded first.
        assert_eq!(value.to_str().ok(), Some("Basic YWxpY2U6c0BjcmV0"));
        assert!(value.is_sensitive());
        for (bad, why) in [
            ("prom:9090", "must start with http:// or https://"),
            ("ftp://x", "must start with"),
            ("http://", "not a URL"),
            ("http://p:9090/?x=1", "query"),
            ("http://prom:99999", "port \"99999\" is not a port"),
            ("http://prom:0", "port \"0\" is not a port"),
            ("http://u:hunter2@prom:99999", "is not a port"),
        ] {
            let err = PrometheusClient::new(bad).expect_err(bad).to_string();
            assert!(err.contains(why), "{bad}: {err}");
            assert!(!err.contains("hunter2"), "{bad}: the password is printed: {err}");
        }
        let both = ClientOptions { bearer_token_file: Some("/token".into()), ..ClientOptions::default() };
        let err = PrometheusClient::with_options("http://u:p@prom", &both).expect_err("two credentials").to_string();
        assert!(err.contains("give one") && !err.contains("u:p"), "{err}");
        let ca = ClientOptions { ca_file: Some("/ca.pem".into()), ..ClientOptions::default() };
        assert!(PrometheusClient::with_options("http://prom", &ca).is_err(), "a CA file with plain http");
        let missing = PrometheusClient::with_options("https://prom", &ca).expect_err("no such CA file");
        assert!(missing.is_bad_input() && missing.to_string().contains("--prometheus-ca-file /ca.pem"), "{missing}");
    }

    #[test]
    fn errors_print_urls_with_the_user_info_redacted() {
        assert_eq!(redacted("https://u:pw@h:1/x?y"), "https://***@h:1/x?y");
        assert_eq!(redacted("http://h/x@y"), "http://h/x@y");
        assert_eq!(redacted("u:pw@h"), "***@h");
        assert_eq!(redacted("http://a@b@h"), "http://***@h");
    }

    /// A one-shot server: answers `response` to the first request and hands back its head.
    async fn serve_once(response: &'static str) -> (String, tokio::task::JoinHandle<String>) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buf).await.expect("read");
                if n == 0 {
                    break;
                }
                head.extend_from_slice(&buf[..n]);
            }
            socket.write_all(response.as_bytes()).await.expect("write");
            String::from_utf8_lossy(&head).into_owned()
        });
        (addr.to_string(), task)
    }

    #[tokio::test]
    async fn user_info_goes_in_a_basic_header_never_in_the_request_line() {
        let (addr, head) = serve_once(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 63\r\n\r\n\
             {\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[]}}",
        )
        .await;
        let client = PrometheusClient::new(&format!("http://alice:s3cret@{addr}/prefix")).expect("client");
        assert_eq!(client.query("up", 1.0).await.expect("an empty vector"), vec![]);
        let head = head.await.expect("served");
        let request_line = head.lines().next().unwrap_or_default();
        assert!(request_line.starts_with("GET /prefix/api/v1/query?query=up&time=1.000 HTTP/1.1"), "{head}");
        assert!(!head.contains("s3cret") && !head.contains("alice"), "credentials in clear: {head}");
        // base64("alice:s3cret")
        assert!(head.lines().any(|l| l.eq_ignore_ascii_case("authorization: Basic YWxpY2U6czNjcmV0")), "{head}");
        assert!(head.lines().any(|l| l.eq_ignore_ascii_case(&format!("host: {addr}"))), "{head}");
    }

    #[tokio::test]
    async fn a_bearer_token_is_read_from_its_file_for_every_request() {
        let dir = tempfile::tempdir().expect("tempdir");
        let token = dir.path().join("token");
        let options = ClientOptions { bearer_token_file: Some(token.clone()), ..ClientOptions::default() };
        let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 63\r\n\r\n\
             {\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[]}}";
        for value in ["first-token\n", "rotated-token"] {
            std::fs::write(&token, value).expect("write the token");
            let (addr, head) = serve_once(answer).await;
            let client = PrometheusClient::with_options(&format!("http://{addr}"), &options).expect("client");
            client.query("up", 1.0).await.expect("answer");
            let head = head.await.expect("served");
            let want = format!("authorization: Bearer {}", value.trim());
            assert!(head.lines().any(|l| l.eq_ignore_ascii_case(&want)), "{want}: {head}");
        }
        std::fs::write(&token, "  \n").expect("write");
        let client = PrometheusClient::with_options("http://127.0.0.1:1", &options).expect("client");
        let err = client.query("up", 1.0).await.expect_err("an empty token");
        assert!(err.is_bad_input() && err.to_string().contains("empty"), "{err}");
    }

    #[tokio::test]
    async fn a_login_page_is_reported_with_its_status_and_content_type() {
        for (response, status) in [
            (
                "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: 46\r\n\r\n\
                 <html><body><form>Sign in</form></body></html>",
                "HTTP 200 with text/html; charset=utf-8, not the Prometheus HTTP API's JSON",
            ),
            (
                "HTTP/1.1 401 Unauthorized\r\ncontent-type: text/html\r\ncontent-length: 20\r\n\r\n\
                 <h1>Login first</h1>",
                "answered HTTP 401 (text/html): <h1>Login first</h1>",
            ),
        ] {
            let (addr, _head) = serve_once(response).await;
            let client = PrometheusClient::new(&format!("http://u:hunter2@{addr}")).expect("client");
            let err = crate::error_chain::Chain(&client.query("up", 1.0).await.expect_err("not the API")).to_string();
            assert!(err.contains(status), "{err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
    }

    #[tokio::test]
    async fn an_unreachable_prometheus_is_named_without_its_password() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port");
        let client = PrometheusClient::new(&format!("http://alice:hunter2@{closed}")).expect("client");
        let err = client.query("up", 1.0).await.expect_err("nothing listens");
        let text = crate::error_chain::Chain(&err).to_string();
        assert!(err.is_no_telemetry() && text.contains(&format!("http://{closed}")), "{text}");
        assert!(!text.contains("hunter2") && !format!("{err:?}").contains("hunter2"), "{text}");
    }

    #[test]
    fn the_api_shapes_decode_with_nan_and_infinities() {
        let a: Answer = serde_json::from_str(
            r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"class":"a"},"values":[[1.5,"NaN"],[3,"+Inf"],[4.5,"2"]]}]}}"#,
        )
        .expect("decodes");
        let Some(Data::Matrix(m)) = a.data else { panic!("matrix") };
        let values: Vec<f64> = m[0].values.iter().filter_map(Point::value).collect();
        assert!(values[0].is_nan() && values[1] == f64::INFINITY && values[2] == 2.0);
    }
}
