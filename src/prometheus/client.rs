//! A small client of Prometheus's HTTP API (`/api/v1/query`,
//! `/api/v1/query_range`) on hyper. Plain http only: Prometheus is read
//! inside the cluster or over a port-forward; put TLS in front if needed.
//! Every wait is bounded (connect and the whole exchange) and so is the size
//! of an answer.

use std::{collections::BTreeMap, time::Duration};

use bytes::Bytes;
use http::{header, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use serde::Deserialize;

use super::error::PrometheusError;

/// The largest answer read (a week of 64 classes at 1,000 steps is ~10 MiB).
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

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

#[derive(Clone, Debug)]
pub struct PrometheusClient {
    base: String,
    authority: String,
    timeout: Duration,
}

impl PrometheusClient {
    /// `base_url`: http://host:port, optionally with a path prefix (`--web.route-prefix`).
    pub fn new(base_url: &str) -> Result<Self, PrometheusError> {
        let invalid =
            |reason: &str| PrometheusError::InvalidUrl { url: base_url.to_owned(), reason: reason.to_owned() };
        let uri: Uri = base_url.parse().map_err(|_| invalid("not a URL"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => return Err(invalid("only plain http:// is supported (TLS: a port-forward or a sidecar)")),
            _ => return Err(invalid("must start with http://")),
        }
        let authority = uri.authority().ok_or_else(|| invalid("no host"))?;
        if uri.query().is_some() {
            return Err(invalid("must not carry a query"));
        }
        let port = authority.port_u16().unwrap_or(80);
        Ok(PrometheusClient {
            base: format!("http://{}{}", authority, uri.path().trim_end_matches('/')),
            authority: format!("{}:{port}", authority.host().trim_start_matches('[').trim_end_matches(']')),
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
        let uri = format!("{}{path}?{query}", self.base);
        let seconds = self.timeout.as_secs();
        let (status, body) = tokio::time::timeout(self.timeout, self.exchange(&uri))
            .await
            .map_err(|_| PrometheusError::Timeout { url: self.base.clone(), seconds })??;
        let answer: Answer = match serde_json::from_slice(&body) {
            Ok(a) => a,
            Err(_) if !status.is_success() => {
                let text = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
                return Err(PrometheusError::Status { status: status.as_u16(), body: text });
            }
            Err(e) => return Err(PrometheusError::Decode(e)),
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

    async fn exchange(&self, uri: &str) -> Result<(StatusCode, Bytes), PrometheusError> {
        let unreachable = |source| PrometheusError::Unreachable { url: self.base.clone(), source };
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(&self.authority))
            .await
            .map_err(|_| unreachable(std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")))?
            .map_err(unreachable)?;
        let http = |source| PrometheusError::Http { url: self.base.clone(), source };
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(http)?;
        // The connection is driven until the answer is read; dropped with it.
        let driver = tokio::spawn(conn);
        let request = Request::get(uri)
            .header(header::HOST, &self.authority)
            .header(header::ACCEPT, "application/json")
            .body(Empty::<Bytes>::new())
            .map_err(|_| PrometheusError::InvalidUrl {
                url: uri.to_owned(),
                reason: "not a valid request URI".into(),
            })?;
        let response = sender.send_request(request).await.map_err(http)?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_RESPONSE_BYTES).collect().await.map_err(|e| {
            match e.downcast::<hyper::Error>() {
                Ok(e) => http(*e),
                Err(_) => PrometheusError::TooLarge { limit: MAX_RESPONSE_BYTES },
            }
        })?;
        driver.abort();
        Ok((status, body.to_bytes()))
    }
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
    fn only_plain_http_urls_are_accepted() {
        assert_eq!(PrometheusClient::new("http://127.0.0.1:9090/").expect("valid").base_url(), "http://127.0.0.1:9090");
        assert_eq!(PrometheusClient::new("http://prom/prefix").expect("valid").authority, "prom:80");
        for bad in ["https://prom:9090", "prom:9090", "http://", "ftp://x", "http://p:9090/?x=1"] {
            assert!(matches!(PrometheusClient::new(bad), Err(PrometheusError::InvalidUrl { .. })), "{bad}");
        }
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
