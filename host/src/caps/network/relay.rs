//! Issue 72, rule 1: a worker holds no socket and no key. An app's outgoing
//! request is handed by its worker to its launcher over the worker's channel
//! ([`Outgoing`], through a [`Relay`]); the launcher sends it through the
//! call's filter — the origin, the address after the name lookup, the
//! private and loopback rules, the key added, the answer redacted — with
//! [`send_for`], and gives back the answer's head ([`Received`]) and then its
//! body a piece at a time, as it comes, bounded as a request the worker sent
//! itself was. A failure crosses the channel as a [`Failure`].
//!
//! The worker still admits a request to an origin granted to its call
//! before it hands it over (nothing else is handed over), and bounds its
//! body; everything that decides where a request goes and what it carries
//! is the launcher's.

use std::future::Future;

use base64::Engine as _;

use super::*;

/// The channel's encoding of bytes (a header's value may be any bytes).
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// A request as the app made it, handed by its worker to its launcher.
#[derive(Debug, Serialize, Deserialize)]
pub struct Outgoing {
    pub method: String,
    /// The whole address (scheme, host, port, path and query).
    pub uri: String,
    /// Each value in base64.
    pub headers: Vec<(String, String)>,
    /// base64.
    pub body: String,
    pub connect_timeout_ms: Option<u64>,
    pub first_byte_timeout_ms: Option<u64>,
}

/// The head of an answer, as its launcher gives it back.
#[derive(Debug, Serialize, Deserialize)]
pub struct Received {
    pub status: u16,
    /// Each value in base64.
    pub headers: Vec<(String, String)>,
    /// Where the host put a key in place of what the app put there (the
    /// record says so); never a value.
    pub replaced: Vec<String>,
}

/// What a worker hands its requests to: its launcher, over its channel.
pub trait Relay: Send + Sync {
    /// Sends `outgoing` on: the answer's head, and its body as it comes.
    fn send(&self, outgoing: Outgoing) -> Pin<Box<dyn Future<Output = Result<Relayed, Failure>> + Send>>;
}

/// An answer as its worker gets it back: its head, then its body's pieces
/// as they come (the channel ends with the body).
pub struct Relayed {
    pub head: Received,
    pub pieces: tokio::sync::mpsc::UnboundedReceiver<Piece>,
    /// Said when the app drops the body before its end: its launcher stops
    /// sending it.
    pub gone: Box<dyn FnOnce() + Send>,
}

/// One piece of an answer's body as a worker gets it back.
pub enum Piece {
    Data(Vec<u8>),
    /// Its trailers (each value in base64), which end it.
    Trailers(Vec<(String, String)>),
    /// It failed part way.
    Failed(Failure),
}

/// A network failure, as the channel carries it: the `wasi:http` error the
/// app reads, with no more in it than it would have had.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Failure {
    Denied,
    IpProhibited,
    UriInvalid,
    DnsTimeout,
    Dns(Option<String>),
    NotFound,
    Unavailable,
    /// Its worker has as many requests under way as it may.
    Busy,
    Refused,
    Terminated,
    ConnectTimeout,
    ReadTimeout,
    Tls,
    TlsCertificate,
    Protocol,
    Incomplete,
    RequestBodySize(Option<u64>),
    ResponseBodySize(Option<u64>),
    ContentCoding(Option<String>),
    Internal(Option<String>),
}

impl Failure {
    /// What the channel says of `e`.
    pub fn of(e: &HttpError) -> Failure {
        use std::io::ErrorKind as Io;
        match e {
            HttpError::HttpRequestDenied => Failure::Denied,
            HttpError::DestinationIpProhibited => Failure::IpProhibited,
            HttpError::HttpRequestUriInvalid => Failure::UriInvalid,
            HttpError::DnsTimeout => Failure::DnsTimeout,
            HttpError::DnsError { rcode, .. } => Failure::Dns(rcode.clone()),
            HttpError::DestinationNotFound => Failure::NotFound,
            HttpError::DestinationUnavailable => Failure::Unavailable,
            HttpError::ConnectionLimitReached => Failure::Busy,
            HttpError::ConnectionRefused => Failure::Refused,
            HttpError::ConnectionTerminated => Failure::Terminated,
            HttpError::ConnectionTimeout => Failure::ConnectTimeout,
            HttpError::ConnectionReadTimeout => Failure::ReadTimeout,
            HttpError::TlsProtocolError => Failure::Tls,
            HttpError::TlsCertificateError => Failure::TlsCertificate,
            HttpError::HttpProtocolError => Failure::Protocol,
            HttpError::HttpResponseIncomplete => Failure::Incomplete,
            HttpError::HttpRequestBodySize(n) => Failure::RequestBodySize(*n),
            HttpError::HttpResponseBodySize(n) => Failure::ResponseBodySize(*n),
            HttpError::HttpResponseContentCoding(why) => Failure::ContentCoding(why.clone()),
            HttpError::InternalError(why) => Failure::Internal(why.clone()),
            HttpError::Connect(io) => match io.kind() {
                Io::ConnectionRefused => Failure::Refused,
                Io::TimedOut => Failure::ConnectTimeout,
                Io::ConnectionReset | Io::ConnectionAborted => Failure::Terminated,
                _ => Failure::Unavailable,
            },
            HttpError::Tls(io) if io.to_string().to_ascii_lowercase().contains("certificate") => {
                Failure::TlsCertificate
            }
            HttpError::Tls(_) => Failure::Tls,
            HttpError::Hyper(h) if h.is_timeout() => Failure::ReadTimeout,
            HttpError::Hyper(h) if h.is_incomplete_message() => Failure::Incomplete,
            HttpError::Hyper(_) => Failure::Protocol,
            other => Failure::Internal(Some(other.to_string())),
        }
    }

    /// The error the app reads.
    pub fn into_error(self) -> HttpError {
        match self {
            Failure::Denied => HttpError::HttpRequestDenied,
            Failure::IpProhibited => HttpError::DestinationIpProhibited,
            Failure::UriInvalid => HttpError::HttpRequestUriInvalid,
            Failure::DnsTimeout => HttpError::DnsTimeout,
            Failure::Dns(rcode) => HttpError::DnsError { rcode, info_code: None },
            Failure::NotFound => HttpError::DestinationNotFound,
            Failure::Unavailable => HttpError::DestinationUnavailable,
            Failure::Busy => HttpError::ConnectionLimitReached,
            Failure::Refused => HttpError::ConnectionRefused,
            Failure::Terminated => HttpError::ConnectionTerminated,
            Failure::ConnectTimeout => HttpError::ConnectionTimeout,
            Failure::ReadTimeout => HttpError::ConnectionReadTimeout,
            Failure::Tls => HttpError::TlsProtocolError,
            Failure::TlsCertificate => HttpError::TlsCertificateError,
            Failure::Protocol => HttpError::HttpProtocolError,
            Failure::Incomplete => HttpError::HttpResponseIncomplete,
            Failure::RequestBodySize(n) => HttpError::HttpRequestBodySize(n),
            Failure::ResponseBodySize(n) => HttpError::HttpResponseBodySize(n),
            Failure::ContentCoding(why) => HttpError::HttpResponseContentCoding(why),
            Failure::Internal(why) => HttpError::InternalError(why),
        }
    }
}

/// `headers` as the channel carries them.
pub fn headers_out(headers: &http::HeaderMap) -> Vec<(String, String)> {
    headers.iter().map(|(k, v)| (k.as_str().to_string(), B64.encode(v.as_bytes()))).collect()
}

/// The headers the channel carried; one that is not a header is a request
/// (or answer) that is not one.
pub fn headers_in(headers: Vec<(String, String)>) -> Result<http::HeaderMap, HttpError> {
    let mut map = http::HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let name = http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| HttpError::HttpProtocolError)?;
        let value = B64.decode(value.as_bytes()).map_err(|_| HttpError::HttpProtocolError)?;
        let value = http::HeaderValue::from_bytes(&value).map_err(|_| HttpError::HttpProtocolError)?;
        map.append(name, value);
    }
    Ok(map)
}

/// Bytes as the channel carries them.
pub fn bytes_out(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

/// The bytes the channel carried; `None` when they are not base64.
pub fn bytes_in(text: &str) -> Option<Vec<u8>> {
    B64.decode(text.as_bytes()).ok()
}

/// In the worker: hands `request` to `relay`, once it is admitted to an
/// origin of the call and its body is within the request's bound; the
/// answer is the launcher's.
pub(super) async fn relayed_send(
    allowed: &[Origin],
    limits: NetLimits,
    keys: &KeysUsed,
    relay: &dyn Relay,
    request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
) -> Result<(http::Response<WasiBody>, ResponseFuture), HttpError> {
    let uri = request.uri().clone();
    admit(allowed, &uri)?;
    let (head, body) = request.into_parts();
    if let Some(len) = head.headers.get(http::header::CONTENT_LENGTH) {
        let len: u64 = len.to_str().ok().and_then(|l| l.parse().ok()).unwrap_or(u64::MAX);
        if len > limits.request_max_bytes {
            return Err(HttpError::HttpRequestBodySize(Some(len)));
        }
    }
    let body = Capped::request(body, limits.request_max_bytes).collect().await?.to_bytes();
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let outgoing = Outgoing {
        method: head.method.as_str().to_string(),
        uri: uri.to_string(),
        headers: headers_out(&head.headers),
        body: bytes_out(&body),
        connect_timeout_ms: options.and_then(|o| o.connect_timeout).map(ms),
        first_byte_timeout_ms: options.and_then(|o| o.first_byte_timeout).map(ms),
    };
    let Relayed { head: received, pieces, gone } = relay.send(outgoing).await.map_err(Failure::into_error)?;
    let body = Incoming { pieces, gone: Some(gone), ended: false }.boxed_unsync();
    if !received.replaced.is_empty() {
        keys.replaced.lock().unwrap_or_else(|p| p.into_inner()).extend(received.replaced);
    }
    let mut response = http::Response::new(body);
    *response.status_mut() = http::StatusCode::from_u16(received.status).map_err(|_| HttpError::HttpProtocolError)?;
    *response.headers_mut() = headers_in(received.headers)?;
    Ok((response, Box::new(async { Ok(()) })))
}

/// In the launcher: sends what a worker handed over through the call's
/// filter (`network`: its origins, deadline, bounds and keys), as if the
/// app's own request: the answer's head, and its body to read.
pub async fn send_for(network: &CallNetwork, outgoing: Outgoing) -> Result<(Received, WasiBody), HttpError> {
    let Outgoing { method, uri, headers, body, connect_timeout_ms, first_byte_timeout_ms } = outgoing;
    let method = http::Method::from_bytes(method.as_bytes()).map_err(|_| HttpError::HttpRequestMethodInvalid)?;
    let uri: http::Uri = uri.parse().map_err(|_| HttpError::HttpRequestUriInvalid)?;
    let body = Bytes::from(bytes_in(&body).ok_or(HttpError::HttpProtocolError)?);
    let mut request = http::Request::new(http_body_util::Full::new(body).map_err(|n| match n {}).boxed_unsync());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.headers_mut() = headers_in(headers)?;
    let options = options_of(connect_timeout_ms, first_byte_timeout_ms);
    // This request's own note of the places where a key replaced the app's.
    let keys = KeysUsed { hands: network.keys.hands.clone(), replaced: Arc::default() };
    let (response, _done) =
        filtered_send(&network.allowed, network.deadline, network.limits, &keys, request, Some(options)).await?;
    let replaced = std::mem::take(&mut *keys.replaced.lock().unwrap_or_else(|p| p.into_inner()));
    let (head, body) = response.into_parts();
    let received = Received { status: head.status.as_u16(), headers: headers_out(&head.headers), replaced };
    Ok((received, body))
}

/// The app's own timeouts of a request, as its worker handed them over
/// (the filter holds them to the call's bounds).
fn options_of(connect_timeout_ms: Option<u64>, first_byte_timeout_ms: Option<u64>) -> RequestOptions {
    RequestOptions {
        connect_timeout: connect_timeout_ms.map(Duration::from_millis),
        first_byte_timeout: first_byte_timeout_ms.map(Duration::from_millis),
        ..RequestOptions::default()
    }
}

/// An answer's body as its pieces come over the channel; what is dropped
/// before its end says so (`gone`: the launcher stops sending it).
struct Incoming {
    pieces: tokio::sync::mpsc::UnboundedReceiver<Piece>,
    gone: Option<Box<dyn FnOnce() + Send>>,
    ended: bool,
}

impl Body for Incoming {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let piece = match self.pieces.poll_recv(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(p) => p,
        };
        Poll::Ready(match piece {
            Some(Piece::Data(data)) => Some(Ok(Frame::data(Bytes::from(data)))),
            Some(Piece::Trailers(t)) => {
                self.ended = true;
                Some(headers_in(t).map(Frame::trailers))
            }
            Some(Piece::Failed(failure)) => {
                self.ended = true;
                Some(Err(failure.into_error()))
            }
            None => {
                self.ended = true;
                None
            }
        })
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        if let Some(gone) = self.gone.take().filter(|_| !self.ended) {
            gone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A launcher that keeps what it was handed and answers 201 with a
    /// body and trailers.
    #[derive(Default)]
    struct Kept(std::sync::Mutex<Vec<Outgoing>>);

    impl Relay for Kept {
        fn send(&self, outgoing: Outgoing) -> Pin<Box<dyn Future<Output = Result<Relayed, Failure>> + Send>> {
            self.0.lock().unwrap().push(outgoing);
            let (to_body, pieces) = tokio::sync::mpsc::unbounded_channel();
            let _ = to_body.send(Piece::Data(b"hel".to_vec()));
            let _ = to_body.send(Piece::Data(b"lo".to_vec()));
            let _ = to_body.send(Piece::Trailers(vec![("x-t".into(), bytes_out(b"1"))]));
            let head = Received {
                status: 201,
                headers: vec![("x-a".into(), bytes_out(b"b"))],
                replaced: vec!["header Authorization".into()],
            };
            Box::pin(async move { Ok(Relayed { head, pieces, gone: Box::new(|| ()) }) })
        }
    }

    fn request(uri: &str, body: &'static [u8]) -> http::Request<WasiBody> {
        let mut r = http::Request::new(
            http_body_util::Full::new(Bytes::from_static(body)).map_err(|n| match n {}).boxed_unsync(),
        );
        *r.uri_mut() = uri.parse().unwrap();
        r.headers_mut().insert("x-app", http::HeaderValue::from_static("v"));
        r
    }

    const LIMITS: NetLimits =
        NetLimits { request_max_bytes: 8, response_max_bytes: 1 << 20, connect_timeout: Duration::from_secs(2) };

    /// In a worker: a request to an origin not granted, or with a body
    /// over its bound, is refused there and never handed over; one within
    /// both is handed over whole, and the launcher's answer — head, body in
    /// pieces, trailers, where a key replaced the app's header — is the app's.
    #[tokio::test]
    async fn a_workers_request_is_handed_over_only_when_admitted_and_within_its_bound() {
        let allowed = vec![Origin::parse("http://127.0.0.1:8080").unwrap()];
        let (keys, relay) = (KeysUsed::default(), Kept::default());
        let send = |uri: &str, body: &'static [u8], options| {
            relayed_send(&allowed, LIMITS, &keys, &relay, request(uri, body), options)
        };
        let denied = send("http://127.0.0.1:9/", b"", None).await.err().unwrap_or_else(|| panic!("refused"));
        assert!(matches!(denied, HttpError::HttpRequestDenied), "{denied:?}");
        let over = send("http://127.0.0.1:8080/", b"123456789", None).await.err().unwrap_or_else(|| panic!("refused"));
        assert!(matches!(over, HttpError::HttpRequestBodySize(_)), "{over:?}");
        // A length declared over the bound is refused at once, whatever
        // the body; one at the bound goes.
        let mut declared = request("http://127.0.0.1:8080/", b"1234");
        declared.headers_mut().insert(http::header::CONTENT_LENGTH, http::HeaderValue::from_static("100"));
        let e = relayed_send(&allowed, LIMITS, &keys, &relay, declared, None)
            .await
            .err()
            .unwrap_or_else(|| panic!("refused"));
        assert!(matches!(e, HttpError::HttpRequestBodySize(Some(100))), "{e:?}");
        assert!(relay.0.lock().unwrap().is_empty(), "nothing was handed over");
        let mut at_bound = request("http://127.0.0.1:8080/", b"12345678");
        at_bound.headers_mut().insert(http::header::CONTENT_LENGTH, http::HeaderValue::from_static("8"));
        let _sent = relayed_send(&allowed, LIMITS, &keys, &relay, at_bound, None).await.expect("at its bound");
        relay.0.lock().unwrap().clear();
        let options = RequestOptions { connect_timeout: Some(Duration::from_millis(250)), ..RequestOptions::default() };
        let (response, _) = send("http://127.0.0.1:8080/x?y=1", b"body", Some(options)).await.expect("handed over");
        {
            let sent = relay.0.lock().unwrap();
            let sent = &sent[0];
            assert_eq!((sent.method.as_str(), sent.uri.as_str()), ("GET", "http://127.0.0.1:8080/x?y=1"));
            assert_eq!(bytes_in(&sent.body).unwrap(), b"body");
            assert!(sent.headers.contains(&("x-app".into(), bytes_out(b"v"))), "{:?}", sent.headers);
            assert_eq!((sent.connect_timeout_ms, sent.first_byte_timeout_ms), (Some(250), None));
        }
        assert_eq!(response.status(), 201);
        assert_eq!(response.headers()["x-a"], "b");
        let body = response.into_body().collect().await.expect("the body");
        assert_eq!(body.trailers().expect("its trailers")["x-t"], "1");
        assert_eq!(body.to_bytes(), Bytes::from_static(b"hello"));
        assert_eq!(keys.said(), "header Authorization");
    }

    /// In the launcher: what a worker handed over goes through the call's
    /// own filter — to its granted origin it is sent and answered; to any
    /// other (the worker's word is not trusted) it is refused, never sent.
    #[tokio::test]
    async fn the_launcher_sends_what_a_worker_handed_over_through_the_calls_own_filter() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = served.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut head = vec![0u8; 4096];
                let _ = stream.read(&mut head).await;
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok").await;
            }
        });
        let origin = Origin::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let network = CallNetwork::new(vec![origin], Instant::now() + Duration::from_secs(10), LIMITS);
        let out = |uri: String| Outgoing {
            method: "GET".into(),
            uri,
            headers: Vec::new(),
            body: String::new(),
            connect_timeout_ms: None,
            first_byte_timeout_ms: None,
        };
        let (received, body) = send_for(&network, out(format!("http://127.0.0.1:{port}/a"))).await.expect("sent");
        assert_eq!(received.status, 200);
        assert_eq!(body.collect().await.expect("the body").to_bytes(), Bytes::from_static(b"ok"));
        for other in
            [format!("http://localhost:{port}/"), format!("https://127.0.0.1:{port}/"), "http://10.0.0.1/".into()]
        {
            let e = send_for(&network, out(other.clone())).await.err().unwrap_or_else(|| panic!("refused"));
            assert!(matches!(e, HttpError::HttpRequestDenied), "{other}: {e:?}");
        }
        let e = send_for(&network, Outgoing { method: "G ET".into(), ..out(format!("http://127.0.0.1:{port}/")) });
        assert!(matches!(e.await.err(), Some(HttpError::HttpRequestMethodInvalid)));
        let e = send_for(&network, Outgoing { body: "not base64!".into(), ..out(format!("http://127.0.0.1:{port}/")) });
        assert!(matches!(e.await.err(), Some(HttpError::HttpProtocolError)));
        assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 1, "only the granted request reached the server");
    }

    #[test]
    fn a_failure_crosses_the_channel_as_the_error_the_app_would_have_read() {
        for e in [
            HttpError::HttpRequestDenied,
            HttpError::DestinationIpProhibited,
            HttpError::DnsError { rcode: Some("no such name".into()), info_code: None },
            HttpError::HttpResponseBodySize(Some(9)),
            HttpError::HttpResponseContentCoding(Some("why".into())),
            HttpError::ConnectionReadTimeout,
        ] {
            let said = serde_json::to_string(&Failure::of(&e)).unwrap();
            let back: Failure = serde_json::from_str(&said).unwrap();
            assert_eq!(back.into_error().to_string(), e.to_string(), "{said}");
        }
        let refused = HttpError::Connect(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(matches!(Failure::of(&refused).into_error(), HttpError::ConnectionRefused));
    }

    #[test]
    fn the_apps_own_timeouts_cross_the_channel() {
        let o = options_of(Some(250), Some(1500));
        let both = (Some(Duration::from_millis(250)), Some(Duration::from_millis(1500)));
        assert_eq!((o.connect_timeout, o.first_byte_timeout), both);
        let o = options_of(None, None);
        assert_eq!((o.connect_timeout, o.first_byte_timeout), (None, None));
    }

    #[test]
    fn headers_cross_the_channel_byte_for_byte_and_what_is_no_header_is_refused() {
        let mut map = http::HeaderMap::new();
        map.append("x-a", http::HeaderValue::from_bytes(b"caf\xe9 1").unwrap());
        map.append("x-a", http::HeaderValue::from_static("two"));
        let back = headers_in(headers_out(&map)).unwrap();
        assert_eq!(back, map);
        assert!(headers_in(vec![("bad name".into(), bytes_out(b"x"))]).is_err());
        assert!(headers_in(vec![("x-b".into(), bytes_out(b"a\nb"))]).is_err());
        assert!(headers_in(vec![("x-b".into(), "not base64!".into())]).is_err());
    }
}
