//! The `network` capability: `wasi:http/outgoing-handler` behind a filter.
//!
//! A call is given the origins its release declared **and** the person granted,
//! and only when its route is `external`. For every request:
//!
//! 1. the URL's scheme, host and port must match a given origin (a `*.domain`
//!    origin matches subdomains of `domain`), else `HttpRequestDenied`;
//! 2. the address — the literal in the URL, or every address the name resolves
//!    to — may not be loopback, private, link-local, CGNAT, unspecified,
//!    multicast or otherwise special (IPv4-mapped and NAT64 IPv6 included),
//!    unless the origin names that very address literally, else
//!    `DestinationIpProhibited`;
//! 3. the connection goes to the address that was checked (no second lookup,
//!    so a name cannot be rebound between check and use);
//! 4. redirects are returned to the guest, never followed; the request and
//!    response bodies are capped; connecting and waiting are bounded by the
//!    call's deadline.
//!
//! `wasi:sockets` is denied outright in the call's WASI context (see
//! `runtime`), so this is the only way out.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::BodyExt as _;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use serde::{Deserialize, Serialize};

use crate::problems::Problems;

pub mod relay;

/// A network origin an app asks for: `scheme://host[:port]`, where the host may
/// be `*.domain` to match any subdomain of `domain`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Origin {
    pub scheme: String,
    /// Lowercase host; an IPv6 literal is kept without brackets.
    pub host: String,
    /// Whether `host` is a `*.` wildcard (then `host` holds the suffix).
    pub wildcard: bool,
    pub port: u16,
}

impl Origin {
    /// Parses `scheme://host[:port]` and says what is wrong with it.
    pub fn parse(s: &str) -> Result<Origin, String> {
        let bad = |why: &str| {
            format!(
                "network origin `{}` {why}; write it as scheme://host[:port] (like \"https://example.com\" or \"https://*.example.com:8443\")",
                s.escape_debug()
            )
        };
        let (scheme, rest) = s.split_once("://").ok_or_else(|| bad("has no scheme"))?;
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "http" => 80,
            "https" => 443,
            _ => return Err(bad("uses a scheme other than http or https")),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#']) {
            return Err(bad("has a path, query or fragment (origins have none)"));
        }
        if rest.contains('@') {
            return Err(bad("has a user name or password"));
        }
        let (host, port) = if let Some(after) = rest.strip_prefix('[') {
            let (h, tail) = after.split_once(']').ok_or_else(|| bad("has an unclosed '['"))?;
            if h.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(bad("has a bracketed host that is not an IPv6 address"));
            }
            let port = match tail {
                "" => None,
                t => Some(t.strip_prefix(':').ok_or_else(|| bad("has text after ']'"))?),
            };
            (h.to_ascii_lowercase(), port)
        } else {
            match rest.rsplit_once(':') {
                Some((h, p)) => (h.to_ascii_lowercase(), Some(p)),
                None => (rest.to_ascii_lowercase(), None),
            }
        };
        let port = match port {
            None => default_port,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| bad("has a port that is not a number from 1 to 65535"))?,
        };
        let (wildcard, host) = match host.strip_prefix("*.") {
            Some(suffix) => (true, suffix.to_string()),
            None => (false, host),
        };
        if host.is_empty() {
            return Err(bad("has no host"));
        }
        let ipv6 = host.contains(':');
        if !ipv6 {
            let label_ok = |l: &str| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            };
            if host.len() > 253 || !host.split('.').all(label_ok) {
                return Err(bad("has a host that is not a valid name or address"));
            }
        }
        if wildcard && (ipv6 || host.parse::<std::net::Ipv4Addr>().is_ok() || !host.contains('.')) {
            return Err(bad("puts a wildcard before an address or a top-level name"));
        }
        Ok(Origin { scheme, host, wildcard, port })
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let star = if self.wildcard { "*." } else { "" };
        let default = matches!((self.scheme.as_str(), self.port), ("http", 80) | ("https", 443));
        if self.host.contains(':') {
            write!(f, "{}://[{}]", self.scheme, self.host)?;
        } else {
            write!(f, "{}://{star}{}", self.scheme, self.host)?;
        }
        if !default {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

/// `[capabilities] network`: the origins a release asks for, each once.
pub fn parse_declared(v: &toml::Value, p: &mut Problems) -> Vec<Origin> {
    let mut out: Vec<Origin> = Vec::new();
    match v.as_array() {
        Some(items) => {
            for item in items {
                match item.as_str().map(Origin::parse) {
                    Some(Ok(o)) => {
                        if out.contains(&o) {
                            p.add(format!("[capabilities] network lists `{o}` twice"));
                        } else {
                            out.push(o);
                        }
                    }
                    Some(Err(e)) => p.add(format!("[capabilities] {e}")),
                    None => {
                        p.add("[capabilities] network must list origins as strings, like [\"https://example.com\"]")
                    }
                }
            }
        }
        None => p.add("[capabilities] network must be an array, like [\"https://example.com\"]"),
    }
    out
}

/// The origins an external call of a release may reach: each one the release
/// declares **and** the person granted.
pub fn configure(declared: &[Origin], granted: &[Origin]) -> Vec<Origin> {
    declared.iter().filter(|o| granted.contains(o)).cloned().collect()
}

/// Limits of one call's network use.
#[derive(Debug, Clone, Copy)]
pub struct NetLimits {
    pub request_max_bytes: u64,
    pub response_max_bytes: u64,
    pub connect_timeout: Duration,
}

impl NetLimits {
    /// The limits the configuration sets (`http_*` keys).
    pub fn of(config: &crate::config::Config) -> NetLimits {
        NetLimits {
            request_max_bytes: config.http_request_max_kib << 10,
            response_max_bytes: config.http_response_max_kib << 10,
            connect_timeout: std::time::Duration::from_millis(config.http_connect_timeout_ms),
        }
    }
}

/// One call's view of the network.
pub struct CallNetwork {
    allowed: Arc<Vec<Origin>>,
    deadline: Instant,
    limits: NetLimits,
    /// What puts this call's keys into its requests, each to its own origin
    /// only, and takes them out of what comes back.
    keys: KeysUsed,
    /// In a worker: its launcher, which sends each request (the worker has
    /// no socket and no key: [`relay`]).
    relay: Option<Arc<dyn relay::Relay>>,
}

/// What a call's keys do on the way out and back: `crate::secrets` gives
/// it (`caps` does not name it). A call without keys has [`NoKeys`].
pub trait KeyHands: Send + Sync {
    /// Whether the call has no key (then nothing is changed anywhere).
    fn is_empty(&self) -> bool;
    /// Puts each key bound to `scheme://host:port` into the request `head`
    /// (whose URI is its path and query), after every check; says each place
    /// where it replaced what the app put there.
    fn add(&self, head: &mut http::request::Parts, scheme: &str, host: &str, port: u16) -> Result<Vec<String>, String>;
    /// Takes every key out of a response's (or trailers') headers.
    fn headers(&self, headers: &mut http::HeaderMap);
    /// What takes every key out of one body read in chunks.
    fn body(&self) -> Box<dyn KeyStream>;
    /// Takes every key out of the app's own words (a log line, an answer,
    /// an error).
    fn text<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str>;
    /// The hands of the keys bound to `scheme://host:port` alone, if any:
    /// what a request there carries and what its answer is taken out of. An
    /// answer from any other origin is never changed by a key's value, so it
    /// cannot tell the app whether a guess is right (issue 72, rule 3).
    fn for_origin(&self, scheme: &str, host: &str, port: u16) -> Option<Arc<dyn KeyHands>>;
}

/// Takes keys out of a body read in chunks, even a key split across two.
pub trait KeyStream: Send {
    /// What of `chunk` (and what waited) can be given now; what could start a
    /// key waits for the next chunk.
    fn push(&mut self, chunk: &[u8]) -> Vec<u8>;
    /// What still waited, at the body's end.
    fn finish(&mut self) -> Vec<u8>;
}

/// The hands of a call without keys.
pub struct NoKeys;

impl KeyHands for NoKeys {
    fn is_empty(&self) -> bool {
        true
    }
    fn add(&self, _: &mut http::request::Parts, _: &str, _: &str, _: u16) -> Result<Vec<String>, String> {
        Ok(Vec::new())
    }
    fn headers(&self, _: &mut http::HeaderMap) {}
    fn body(&self) -> Box<dyn KeyStream> {
        Box::new(NoKeys)
    }
    fn text<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        std::borrow::Cow::Borrowed(text)
    }
    fn for_origin(&self, _: &str, _: &str, _: u16) -> Option<Arc<dyn KeyHands>> {
        None
    }
}

impl KeyStream for NoKeys {
    fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        chunk.to_vec()
    }
    fn finish(&mut self) -> Vec<u8> {
        Vec::new()
    }
}

/// A response with every key the call holds taken out of its status text,
/// headers and body (across chunks) before the guest reads any of it. Its
/// length changes with them, so a declared length goes.
fn keys_out(mut response: http::Response<WasiBody>, hands: &Arc<dyn KeyHands>) -> http::Response<WasiBody> {
    if hands.is_empty() {
        return response;
    }
    response.extensions_mut().remove::<hyper::ext::ReasonPhrase>();
    hands.headers(response.headers_mut());
    response.headers_mut().remove(http::header::CONTENT_LENGTH);
    let hands = hands.clone();
    response.map(|b| KeysOut { inner: b, stream: hands.body(), hands, trailers: None, ended: false }.boxed_unsync())
}

/// A body with every key taken out as it is read ([`KeyStream`]).
struct KeysOut {
    inner: WasiBody,
    stream: Box<dyn KeyStream>,
    hands: Arc<dyn KeyHands>,
    /// Trailers that came while bytes still waited: given next.
    trailers: Option<http::HeaderMap>,
    ended: bool,
}

impl Body for KeysOut {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        loop {
            if let Some(t) = self.trailers.take() {
                self.ended = true;
                return Poll::Ready(Some(Ok(Frame::trailers(t))));
            }
            if self.ended {
                return Poll::Ready(None);
            }
            let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => frame,
                Poll::Ready(None) => {
                    self.ended = true;
                    let rest = self.stream.finish();
                    return Poll::Ready((!rest.is_empty()).then(|| Ok(Frame::data(Bytes::from(rest)))));
                }
            };
            match frame.into_data() {
                Ok(data) => {
                    let out = self.stream.push(&data);
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                    }
                }
                Err(frame) => {
                    let Ok(mut trailers) = frame.into_trailers() else { continue };
                    // What waited goes first, then the trailers, which end it.
                    self.hands.headers(&mut trailers);
                    self.trailers = Some(trailers);
                    let rest = self.stream.finish();
                    if !rest.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest)))));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.trailers.is_none()
    }
}

impl CallNetwork {
    /// A call that may reach nothing.
    pub fn none() -> CallNetwork {
        CallNetwork {
            allowed: Arc::default(),
            deadline: Instant::now(),
            limits: NetLimits { request_max_bytes: 0, response_max_bytes: 0, connect_timeout: Duration::ZERO },
            keys: KeysUsed::default(),
            relay: None,
        }
    }

    /// A call that may reach `allowed` (declared ∩ granted) until `deadline`.
    pub fn new(allowed: Vec<Origin>, deadline: Instant, limits: NetLimits) -> CallNetwork {
        CallNetwork { allowed: Arc::new(allowed), deadline, limits, keys: KeysUsed::default(), relay: None }
    }

    /// In a worker: each request is handed to `relay` (its launcher), which
    /// sends it through the same filter with the call's keys.
    pub fn relayed(mut self, relay: Arc<dyn relay::Relay>) -> CallNetwork {
        self.relay = Some(relay);
        self
    }

    /// This call's requests to a key's origin carry it, and every key is
    /// taken out of what comes back (`crate::secrets` makes the hands).
    pub fn with_keys(mut self, hands: Arc<dyn KeyHands>) -> CallNetwork {
        self.keys = KeysUsed { hands, replaced: Arc::default() };
        self
    }

    /// When the call's time is up.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The call's keys as its settling sees them.
    pub fn keys_used(&self) -> KeysUsed {
        self.keys.clone()
    }
}

/// A call's keys: their hands, and where the host replaced what the app had
/// put in a key's place (the record says so).
#[derive(Clone)]
pub struct KeysUsed {
    pub hands: Arc<dyn KeyHands>,
    replaced: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Default for KeysUsed {
    fn default() -> KeysUsed {
        KeysUsed { hands: Arc::new(NoKeys), replaced: Arc::default() }
    }
}

impl KeysUsed {
    /// What the record says of the places the host replaced; empty when none.
    pub fn said(&self) -> String {
        let replaced = self.replaced.lock().unwrap_or_else(|p| p.into_inner());
        let mut seen: Vec<&str> = Vec::new();
        for r in replaced.iter() {
            if !seen.contains(&r.as_str()) {
                seen.push(r);
            }
        }
        seen.join("; ")
    }
}

type ResponseFuture = Box<dyn std::future::Future<Output = Result<(), HttpError>> + Send>;
type SendFuture =
    Box<dyn std::future::Future<Output = Result<(http::Response<WasiBody>, ResponseFuture), HttpError>> + Send>;

impl WasiHttpHooks for CallNetwork {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: ResponseFuture,
    ) -> SendFuture {
        let allowed = self.allowed.clone();
        let deadline = self.deadline;
        let limits = self.limits;
        let keys = self.keys.clone();
        match self.relay.clone() {
            Some(relay) => {
                Box::new(
                    async move { relay::relayed_send(&allowed, limits, &keys, relay.as_ref(), request, options).await },
                )
            }
            None => Box::new(async move { filtered_send(&allowed, deadline, limits, &keys, request, options).await }),
        }
    }
}

impl Origin {
    /// Whether a request to `scheme://host:port` is within this origin.
    pub fn matches(&self, scheme: &str, host: &str, port: u16) -> bool {
        if self.scheme != scheme || self.port != port {
            return false;
        }
        if self.wildcard {
            host.len() > self.host.len() + 1
                && host.ends_with(&self.host)
                && host.as_bytes()[host.len() - self.host.len() - 1] == b'.'
        } else {
            self.host == host
        }
    }

    /// Whether this origin names `ip` literally (`http://127.0.0.1:8080`).
    fn names_address(&self, ip: IpAddr) -> bool {
        !self.wildcard && self.host.parse::<IpAddr>().is_ok_and(|mine| mine.to_canonical() == ip.to_canonical())
    }
}

/// Whether `ip` is an address an app may not reach unless granted by name:
/// anything but a public unicast address.
pub fn is_special(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0                              // "this network"
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64.0.0/10
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19))  // benchmarking
        || a >= 240 // reserved
}

fn special_v6(ip: Ipv6Addr) -> bool {
    let seg = ip.segments();
    if ip.is_unspecified() || ip.is_loopback() || ip.is_multicast() {
        return true;
    }
    if (seg[0] & 0xfe00) == 0xfc00 || (seg[0] & 0xffc0) == 0xfe80 || (seg[0] & 0xffc0) == 0xfec0 {
        return true; // unique local, link-local, site-local
    }
    // NAT64 (64:ff9b::/96) and IPv4-compatible (::a.b.c.d) embed an IPv4 address.
    let embedded = Ipv4Addr::new((seg[6] >> 8) as u8, seg[6] as u8, (seg[7] >> 8) as u8, seg[7] as u8);
    if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2..6] == [0, 0, 0, 0] {
        return special_v4(embedded);
    }
    if seg[..6] == [0, 0, 0, 0, 0, 0] {
        return true;
    }
    // 6to4 (2002::/16) embeds an IPv4 address in bits 16..48.
    if seg[0] == 0x2002 {
        let v4 = Ipv4Addr::new((seg[1] >> 8) as u8, seg[1] as u8, (seg[2] >> 8) as u8, seg[2] as u8);
        return special_v4(v4);
    }
    // Documentation 2001:db8::/32.
    seg[0] == 0x2001 && seg[1] == 0x0db8
}

async fn filtered_send(
    allowed: &[Origin],
    deadline: Instant,
    limits: NetLimits,
    keys: &KeysUsed,
    mut request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
) -> Result<(http::Response<WasiBody>, ResponseFuture), HttpError> {
    let uri = request.uri().clone();
    let to = admit(allowed, &uri)?;
    let remaining = || deadline.saturating_duration_since(Instant::now());
    let addrs = resolve(&to.host, to.port, remaining().min(limits.connect_timeout)).await?;
    check_addresses(to.origin, &to.host, &addrs)?;
    cap_request(&mut request, &uri, limits)?;
    // Last, after every check: a key goes to its very origin only.
    let scheme = if to.tls { "https" } else { "http" };
    let own = keys.hands.for_origin(scheme, &to.host, to.port);
    let (mut head, body) = request.into_parts();
    if own.is_some() {
        plain_answer_asked(&mut head.headers);
    }
    let replaced = keys.hands.add(&mut head, scheme, &to.host, to.port).map_err(|e| HttpError::InternalError(Some(e)));
    let request = http::Request::from_parts(head, body);
    let replaced = replaced?;
    if !replaced.is_empty() {
        keys.replaced.lock().unwrap_or_else(|p| p.into_inner()).extend(replaced);
    }
    let connect_timeout = options
        .and_then(|o| o.connect_timeout)
        .unwrap_or(limits.connect_timeout)
        .min(limits.connect_timeout)
        .min(remaining());
    let first_byte_timeout = options.and_then(|o| o.first_byte_timeout).unwrap_or(remaining()).min(remaining());
    let io = connect(&to, addrs[0], connect_timeout).await?;
    let (response, done) = send(io, request, first_byte_timeout, limits.response_max_bytes).await?;
    match own {
        // Another origin's answer is the guest's as it came: no key's value
        // changes it (no oracle).
        None => Ok((response, done)),
        // The key's own origin: a plain answer only, every key of that origin
        // out of it before the guest reads any of it.
        Some(own) => {
            plain_answer_given(&response)?;
            Ok((keys_out(response, &own), done))
        }
    }
}

/// Issue 72, rule 2: a request that carries a key asks for the plain answer,
/// all of it — `Accept-Encoding: identity`, no `Range` or `If-Range` — so
/// that what comes back is the bytes the redactor reads (a gzip echo or a
/// slice shorter than the key would pass it).
fn plain_answer_asked(headers: &mut http::HeaderMap) {
    headers.remove(http::header::RANGE);
    headers.remove(http::header::IF_RANGE);
    headers.remove(http::header::TE);
    headers.insert(http::header::ACCEPT_ENCODING, http::HeaderValue::from_static("identity"));
}

/// The answer of a key's origin to a request that asked for the plain
/// answer: one that is not (a part, `206`, or a body in an encoding other
/// than identity) is refused with one sentence, never read.
fn plain_answer_given(response: &http::Response<WasiBody>) -> Result<(), HttpError> {
    if response.status() == http::StatusCode::PARTIAL_CONTENT {
        tracing::info!("refused a part (206) of an answer from a key's origin");
        return Err(HttpError::HttpProtocolError);
    }
    let encodings = response.headers().get_all(http::header::CONTENT_ENCODING);
    if encodings.iter().any(|v| !v.to_str().is_ok_and(|e| e.trim().eq_ignore_ascii_case("identity"))) {
        tracing::info!("refused an encoded answer from a key's origin");
        return Err(HttpError::HttpResponseContentCoding(Some(
            "the key's origin answered in an encoding (Content-Encoding) although the host asked for the plain answer; the host does not give such an answer to an app that used a key".into(),
        )));
    }
    Ok(())
}

/// Where an admitted request goes: the granted origin it matched, and the
/// scheme, host and port it names.
#[derive(Debug)]
struct Admitted<'a> {
    origin: &'a Origin,
    host: String,
    port: u16,
    tls: bool,
}

/// Admits a request whose address is an origin granted to this call (http
/// or https only); anything else is `HttpRequestDenied`.
fn admit<'a>(allowed: &'a [Origin], uri: &http::Uri) -> Result<Admitted<'a>, HttpError> {
    let scheme = uri.scheme_str().unwrap_or("").to_ascii_lowercase();
    let host = uri.host().ok_or(HttpError::HttpRequestUriInvalid)?.to_ascii_lowercase();
    let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
    let tls = match scheme.as_str() {
        "https" => true,
        "http" => false,
        _ => return Err(HttpError::HttpRequestDenied),
    };
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let Some(origin) = allowed.iter().find(|o| o.matches(&scheme, &host, port)) else {
        tracing::info!(scheme, host, port, "denied an outgoing request to an origin not granted to this call");
        return Err(HttpError::HttpRequestDenied);
    };
    Ok(Admitted { origin, host, port, tls })
}

/// The addresses of `host` (a literal address is its own), within `timeout`.
async fn resolve(host: &str, port: u16, timeout: Duration) -> Result<Vec<SocketAddr>, HttpError> {
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => match tokio::time::timeout(timeout, tokio::net::lookup_host((host, port))).await {
            Err(_) => return Err(HttpError::DnsTimeout),
            Ok(Err(e)) => return Err(HttpError::DnsError { rcode: Some(e.to_string()), info_code: None }),
            Ok(Ok(a)) => a.collect(),
        },
    };
    if addrs.is_empty() {
        return Err(HttpError::DestinationNotFound);
    }
    Ok(addrs)
}

/// Every address the name has must be allowed: a name that resolves to one
/// public and one private address is refused, whichever comes first. A
/// non-public address is allowed only when the granted origin names it.
fn check_addresses(origin: &Origin, host: &str, addrs: &[SocketAddr]) -> Result<(), HttpError> {
    if let Some(bad) = addrs.iter().find(|a| is_special(a.ip()) && !origin.names_address(a.ip())) {
        tracing::info!(host, address = %bad.ip(), "denied an outgoing request to a non-public address");
        return Err(HttpError::DestinationIpProhibited);
    }
    Ok(())
}

/// The body may not exceed the request cap (a declared length over it is
/// refused at once; a body that grows past it is cut off); the request goes
/// out with its path only.
fn cap_request(request: &mut http::Request<WasiBody>, uri: &http::Uri, limits: NetLimits) -> Result<(), HttpError> {
    if let Some(len) = request.headers().get(http::header::CONTENT_LENGTH) {
        let len: u64 = len.to_str().ok().and_then(|l| l.parse().ok()).unwrap_or(u64::MAX);
        if len > limits.request_max_bytes {
            return Err(HttpError::HttpRequestBodySize(Some(len)));
        }
    }
    let body =
        std::mem::replace(request.body_mut(), http_body_util::Empty::new().map_err(|n| match n {}).boxed_unsync());
    *request.body_mut() = Capped::request(body, limits.request_max_bytes).boxed_unsync();
    *request.uri_mut() = http::Uri::builder()
        .path_and_query(uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"))
        .build()
        .map_err(|_| HttpError::HttpRequestUriInvalid)?;
    Ok(())
}

/// A connection to `addr` (checked), with TLS for https, within `timeout`.
async fn connect(to: &Admitted<'_>, addr: SocketAddr, timeout: Duration) -> Result<Box<dyn Io>, HttpError> {
    let stream = match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
        Err(_) => return Err(HttpError::ConnectionTimeout),
        Ok(Err(e)) => return Err(HttpError::Connect(e)),
        Ok(Ok(s)) => s,
    };
    if !to.tls {
        return Ok(Box::new(stream));
    }
    let name = match to.host.parse::<IpAddr>() {
        Ok(ip) => rustls::pki_types::ServerName::from(ip),
        Err(_) => {
            rustls::pki_types::ServerName::try_from(to.host.clone()).map_err(|_| HttpError::HttpRequestUriInvalid)?
        }
    };
    let connect = tls_connector().connect(name, stream);
    match tokio::time::timeout(timeout.max(Duration::from_millis(1)), connect).await {
        Err(_) => Err(HttpError::ConnectionTimeout),
        Ok(Err(e)) => Err(HttpError::Tls(e)),
        Ok(Ok(s)) => Ok(Box::new(s)),
    }
}

/// Sends `request` over `io` (HTTP/1.1) and answers with the response, its
/// body capped at `max` bytes (a declared length over it is refused at once).
async fn send(
    io: Box<dyn Io>,
    request: http::Request<WasiBody>,
    first_byte_timeout: Duration,
    max: u64,
) -> Result<(http::Response<WasiBody>, ResponseFuture), HttpError> {
    let (mut sender, conn) = hyper::client::conn::http1::handshake(wasmtime_wasi_http::io::TokioIo::new(io))
        .await
        .map_err(HttpError::from)?;
    let driver = tokio::spawn(conn);
    let response = match tokio::time::timeout(first_byte_timeout, sender.send_request(request)).await {
        Err(_) => return Err(HttpError::ConnectionReadTimeout),
        Ok(Err(e)) => return Err(HttpError::from(e)),
        Ok(Ok(r)) => r,
    };
    if let Some(len) = response.headers().get(http::header::CONTENT_LENGTH) {
        let len: u64 = len.to_str().ok().and_then(|l| l.parse().ok()).unwrap_or(0);
        if len > max {
            driver.abort();
            return Err(HttpError::HttpResponseBodySize(Some(len)));
        }
    }
    let response = response.map(|b| Capped::response(b.map_err(HttpError::from).boxed_unsync(), max).boxed_unsync());
    let io_done: ResponseFuture = Box::new(async move {
        match driver.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(HttpError::from(e)),
            Err(_) => Ok(()),
        }
    });
    Ok((response, io_done))
}

trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> Io for T {}

fn tls_connector() -> tokio_rustls::TlsConnector {
    static CONFIG: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.into() };
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        Arc::new(config)
    });
    tokio_rustls::TlsConnector::from(config.clone())
}

/// A body that fails once more than `max` bytes went through it.
struct Capped {
    inner: WasiBody,
    seen: u64,
    max: u64,
    request: bool,
}

impl Capped {
    fn request(inner: WasiBody, max: u64) -> Capped {
        Capped { inner, seen: 0, max, request: true }
    }

    fn response(inner: WasiBody, max: u64) -> Capped {
        Capped { inner, seen: 0, max, request: false }
    }
}

impl Body for Capped {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(f))) => f,
            other => return other,
        };
        if let Some(data) = frame.data_ref() {
            self.seen += data.len() as u64;
            if self.seen > self.max {
                let err = if self.request {
                    HttpError::HttpRequestBodySize(Some(self.seen))
                } else {
                    HttpError::HttpResponseBodySize(Some(self.seen))
                };
                return Poll::Ready(Some(Err(err)));
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(s: &str) -> Origin {
        Origin::parse(s).unwrap()
    }

    #[test]
    fn origins_match_scheme_host_and_port_exactly() {
        assert!(o("https://example.com").matches("https", "example.com", 443));
        assert!(!o("https://example.com").matches("http", "example.com", 80));
        assert!(!o("https://example.com").matches("https", "example.com", 8443));
        assert!(!o("https://example.com").matches("https", "evil-example.com", 443));
        assert!(!o("https://example.com").matches("https", "example.com.evil.net", 443));
        assert!(o("https://*.example.com").matches("https", "api.example.com", 443));
        assert!(o("https://*.example.com").matches("https", "a.b.example.com", 443));
        assert!(!o("https://*.example.com").matches("https", "example.com", 443));
        assert!(!o("https://*.example.com").matches("https", "badexample.com", 443));
        assert!(!o("https://*.example.com").matches("https", ".example.com", 443), "an empty label is no host");
        assert!(o("https://*.example.com").matches("https", "a.example.com", 443));
    }

    #[test]
    fn non_public_addresses_are_special_in_every_spelling() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::7f00:1",
            "::127.0.0.1",
            "2002:7f00:1::",
            "ff02::1",
            // The ranges the standard library does not name, at their edges.
            "0.1.2.3",
            "100.64.0.0",
            "100.127.255.255",
            "192.0.0.1",
            "198.18.0.1",
            "198.19.255.255",
            "240.0.0.1",
            "250.1.2.3",
            "fec0::1",
            "64:ff9b::c000:1",
            "2001:db8::1",
        ] {
            assert!(is_special(ip.parse().unwrap()), "{ip} is special");
        }
        for ip in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700:4700::1111",
            "::ffff:1.1.1.1",
            "64:ff9b::101:101",
            "100.63.255.255",
            "100.128.0.0",
            "192.0.1.1",
            "192.1.0.1",
            "198.17.255.255",
            "198.20.0.1",
            "223.255.255.254",
            // An IPv4 address inside NAT64 is judged by all four bytes, and only
            // 64:ff9b::/96 is NAT64.
            "64:ff9b::c000:101",
            "2606:ff9b::1",
            // 6to4 judged by the IPv4 address it carries, all four bytes.
            "2002:101:101::",
            "2002:c000:101::",
            // Only 2001:db8::/32 is documentation.
            "2001:4860::8888",
            "2a00:db8::1",
        ] {
            assert!(!is_special(ip.parse().unwrap()), "{ip} is public");
        }
    }

    #[test]
    fn only_http_and_https_to_a_granted_origin_are_admitted() {
        let allowed = [o("https://api.example.com"), o("http://127.0.0.1:8080")];
        let uri = |u: &str| u.parse::<http::Uri>().unwrap();
        let to = admit(&allowed, &uri("https://API.example.com/x?y")).unwrap();
        assert_eq!((to.host.as_str(), to.port, to.tls), ("api.example.com", 443, true));
        let to = admit(&allowed, &uri("http://127.0.0.1:8080/")).unwrap();
        assert_eq!((to.port, to.tls), (8080, false));
        for denied in [
            "https://api.example.com:8443/",
            "http://api.example.com/",
            "https://example.com/",
            "ftp://api.example.com/",
            "http://127.0.0.1/",
            "http://127.0.0.1:8081/",
            "http://[::1]:8080/",
        ] {
            assert!(matches!(admit(&allowed, &uri(denied)), Err(HttpError::HttpRequestDenied)), "{denied}");
        }
    }

    #[test]
    fn a_name_with_any_non_public_address_is_refused_unless_the_origin_names_it() {
        let addr = |a: &str| -> SocketAddr { a.parse().unwrap() };
        let named = o("https://api.example.com");
        assert!(check_addresses(&named, "api.example.com", &[addr("93.184.216.34:443")]).is_ok());
        for mixed in [
            vec![addr("93.184.216.34:443"), addr("10.0.0.1:443")],
            vec![addr("127.0.0.1:443"), addr("93.184.216.34:443")],
            vec![addr("[::ffff:169.254.169.254]:443")],
        ] {
            let e = check_addresses(&named, "api.example.com", &mixed);
            assert!(matches!(e, Err(HttpError::DestinationIpProhibited)), "{mixed:?}");
        }
        let literal = o("http://127.0.0.1:8080");
        assert!(check_addresses(&literal, "127.0.0.1", &[addr("127.0.0.1:8080")]).is_ok());
        assert!(check_addresses(&literal, "127.0.0.1", &[addr("127.0.0.2:8080")]).is_err());
    }

    #[test]
    fn only_a_literal_origin_names_an_address() {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(o("http://127.0.0.1:8080").names_address(ip));
        assert!(o("http://127.0.0.1:8080").names_address("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!o("http://localhost:8080").names_address(ip));
        assert!(!o("http://127.0.0.2:8080").names_address(ip));
    }
}
