//! The one HTTP/1.1 client of the tests and benches, on hyper's client: a
//! request read whole ([`request`], [`get`]), or a streamed answer read line by
//! line ([`stream`], for NDJSON watches). Used to talk to the sidecar's local
//! API, the controller's `/metrics` and the status endpoint over plain HTTP.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// No connection.
    #[error("cannot connect to {address}: {source}")]
    Connect {
        /// Where.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The request could not be built (a bad method, path or header).
    #[error("bad request {method} {path}: {source}")]
    Build {
        /// The method.
        method: String,
        /// The path.
        path: String,
        /// Why.
        source: http::Error,
    },
    /// The exchange failed.
    #[error("{method} {path}: {source}")]
    Exchange {
        /// The method.
        method: String,
        /// The path.
        path: String,
        /// Why.
        source: hyper::Error,
    },
}

/// An answer read whole.
#[derive(Debug)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: http::HeaderMap,
    /// Body, as text (lossy).
    pub body: String,
}

impl Response {
    /// The body as JSON; panics (in a test) naming the body when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|error| panic!("{error}: {}", self.body))
    }

    /// A header's value, when present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }
}

/// Sends `method path` with `headers` and `body` and returns the answer head
/// with its unread body.
async fn send(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Result<http::Response<Incoming>, HttpError> {
    let exchange = |source| HttpError::Exchange {
        method: method.to_owned(),
        path: path.to_owned(),
        source,
    };
    let stream = TcpStream::connect(address)
        .await
        .map_err(|source| HttpError::Connect { address, source })?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(exchange)?;
    tokio::spawn(async move {
        // Ends with the exchange; an error shows in `send_request` or the body.
        let _ = connection.await;
    });
    let mut builder = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, "localhost");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let body = match body {
        Some(text) => Full::new(Bytes::from(text.to_owned())).boxed(),
        None => Empty::<Bytes>::new().boxed(),
    };
    let request = builder.body(body).map_err(|source| HttpError::Build {
        method: method.to_owned(),
        path: path.to_owned(),
        source,
    })?;
    sender.send_request(request).await.map_err(exchange)
}

/// One request; the whole answer.
pub async fn request(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Result<Response, HttpError> {
    let answer = send(address, method, path, headers, body).await?;
    let status = answer.status().as_u16();
    let headers = answer.headers().clone();
    let bytes = answer
        .into_body()
        .collect()
        .await
        .map_err(|source| HttpError::Exchange {
            method: method.to_owned(),
            path: path.to_owned(),
            source,
        })?
        .to_bytes();
    Ok(Response {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    })
}

/// `GET path`; the whole answer.
pub async fn get(address: SocketAddr, path: &str) -> Result<Response, HttpError> {
    request(address, "GET", path, &[], None).await
}

/// A streamed answer, read line by line.
pub struct Lines {
    body: Incoming,
    pending: Vec<u8>,
}

impl Lines {
    /// The next line (without its `\n`), or `None` once the stream ended.
    pub async fn next_line(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.pending.iter().position(|&byte| byte == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                return Some(String::from_utf8_lossy(&line[..end]).into_owned());
            }
            let frame = self.body.frame().await?.ok()?;
            if let Ok(data) = frame.into_data() {
                self.pending.extend_from_slice(&data);
            }
        }
    }
}

/// `GET path` whose answer streams; its status and its lines.
pub async fn stream(address: SocketAddr, path: &str) -> Result<(u16, Lines), HttpError> {
    let answer = send(address, "GET", path, &[], None).await?;
    let status = answer.status().as_u16();
    Ok((
        status,
        Lines {
            body: answer.into_body(),
            pending: Vec::new(),
        },
    ))
}
