//! Pulling a package from a registry with the host's own HTTP client: every
//! byte bounded, and the person's login sent only where it belongs (issue
//! 51, rules 8 and 9).
//!
//! A registry's answers are input an attacker wrote. A general client
//! (`oci-client`) reads a manifest whole before anyone looks at it (a 1 GB
//! body peaked at 2.1 GB), sends the person's password to whatever token
//! realm a registry names (`Bearer realm="http://127.0.0.2:5001/token"`: in
//! plain HTTP, to another host), and follows redirects anywhere. So the pull
//! is ours, and small:
//!
//! - the manifest is read as it arrives, at most [`MAX_MANIFEST`] bytes (a
//!   longer one is refused before it is held), its digest computed here and
//!   compared with a `…@sha256:` reference; the layer at most its size in the
//!   manifest, hashed as it arrives ([`fetch`]'s checks);
//! - **where a request may go**: HTTPS anywhere; plain HTTP only to the very
//!   loopback registry the person named (host and port). A redirect or a
//!   token realm elsewhere in plain HTTP is refused, with a sentence;
//! - **where the login may go**: to the registry the person named, and to
//!   the token realm that registry names when it is reached over HTTPS (or
//!   is that same loopback registry). Never to a redirect's host: a
//!   redirect to another host (a blob served from storage) is followed over
//!   HTTPS without any `Authorization`;
//! - at most [`MAX_REDIRECTS`] redirects a request; a token answer at most
//!   [`MAX_TOKEN`] bytes.
//!
//! The install's one deadline over all of it is `packages::fetch`'s.

use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_LENGTH, LOCATION, WWW_AUTHENTICATE};
use reqwest::{StatusCode, Url};
use sha2::Digest as _;

use super::install::refused;
use super::registry::{Target, source_chain};
use crate::elsewhere::text;
use crate::error::{ErrorKind, kinded};

/// The longest manifest read: a Wasm package's manifest is well under a KiB.
pub const MAX_MANIFEST: u64 = 4 << 20;
/// The longest answer of a token realm.
pub const MAX_TOKEN: u64 = 64 << 10;
/// The most redirects one request follows.
pub const MAX_REDIRECTS: usize = 5;
/// How often a layer's progress is said while it arrives.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// The manifest media types asked for: the Wasm artifact's, and the index's
/// (so that an index is named as one, not missed).
const ACCEPTED: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json";

/// The person's login to the registry they named (from their docker or
/// podman login file).
pub struct Login {
    pub user: String,
    pub password: String,
}

/// How a request to the registry is authorised once it asked.
enum Auth {
    None,
    Basic,
    Bearer(String),
}

/// One pull from one registry.
pub struct Pull<'a> {
    target: &'a Target,
    login: Option<Login>,
    http: reqwest::Client,
    /// `http` or `https`: plain HTTP only to a loopback registry.
    scheme: &'static str,
    auth: Auth,
}

/// What a pull read: the manifest's bytes and digest.
pub struct Manifest {
    pub bytes: Vec<u8>,
    pub digest: String,
}

impl<'a> Pull<'a> {
    pub fn new(target: &'a Target, login: Option<Login>) -> anyhow::Result<Pull<'a>> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(15))
            .read_timeout(Duration::from_secs(60))
            .user_agent(concat!("autoapp/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| anyhow::anyhow!("cannot make an HTTP client: {e}"))?;
        let scheme = if super::registry::is_loopback(target.registry()) { "http" } else { "https" };
        Ok(Pull { target, login, http, scheme, auth: Auth::None })
    }

    fn registry(&self) -> &str {
        self.target.registry()
    }

    fn url(&self, path: &str) -> anyhow::Result<Url> {
        Url::parse(&format!("{}://{}/v2/{}/{path}", self.scheme, self.registry(), self.target.reference.repository()))
            .map_err(|e| refused(format!("{} does not make an address ({e})", self.target)))
    }

    /// Whether `url` is the registry the person named: its scheme, its host
    /// (in any case) and its port (a default one written or not).
    fn is_registry(&self, url: &Url) -> bool {
        url.scheme() == self.scheme && same_place(url, self.registry())
    }

    /// Refuses `url` unless a request may go there: HTTPS, or the very
    /// loopback registry the person named over plain HTTP.
    fn may_go(&self, url: &Url, why: &str) -> anyhow::Result<()> {
        if url.scheme() == "https" || self.is_registry(url) {
            return Ok(());
        }
        Err(refused(format!(
            "the registry {} sent {why} {} over plain HTTP; Autoapp speaks plain HTTP only to the loopback registry you named, and sends your login only over HTTPS; nothing was placed",
            self.registry(),
            crate::elsewhere::named(url.as_str())
        )))
    }

    /// The manifest the target names, at most [`MAX_MANIFEST`] bytes.
    pub async fn manifest(&mut self) -> anyhow::Result<Manifest> {
        let reference = &self.target.reference;
        let which = reference.digest().or(reference.tag()).unwrap_or("latest").to_string();
        let url = self.url(&format!("manifests/{which}"))?;
        let response = self.get(url, ACCEPTED).await?;
        // What the registry says the manifest's digest is: a registry whose
        // word does not hold is refused (issue 73, point 2).
        let said =
            response.headers().get(DOCKER_CONTENT_DIGEST).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let bytes = bounded(response, MAX_MANIFEST, "its manifest", self.registry()).await?;
        let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&bytes)));
        for wanted in [reference.digest(), said.as_deref()].into_iter().flatten() {
            if !same_digest(wanted, &bytes) {
                return Err(refused(format!(
                    "the registry {} served {} with a digest that does not match: {digest} is not {}; nothing was placed",
                    self.registry(),
                    self.target,
                    crate::elsewhere::named(wanted)
                )));
            }
        }
        Ok(Manifest { bytes, digest })
    }

    /// The blob `digest`, its answer to be read by the caller.
    pub async fn blob(&mut self, digest: &str) -> anyhow::Result<reqwest::Response> {
        let url = self.url(&format!("blobs/{digest}"))?;
        self.get(url, "*/*").await
    }

    /// A GET of `url` that succeeded: logs in once when the registry asks
    /// (401 with its challenge), follows redirects by the rules above.
    async fn get(&mut self, url: Url, accept: &str) -> anyhow::Result<reqwest::Response> {
        let mut asked = false;
        loop {
            let (response, at) = self.follow(url.clone(), accept).await?;
            match response.status() {
                s if s.is_success() => return Ok(response),
                // Only the registry itself is answered with a login: a host
                // it redirected to that asks for one gets nothing.
                StatusCode::UNAUTHORIZED if !asked && self.is_registry(&at) => {
                    asked = true;
                    let challenge = response
                        .headers()
                        .get(WWW_AUTHENTICATE)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string)
                        .unwrap_or_default();
                    self.log_in(&challenge).await?;
                }
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => return Err(self.refused_access()),
                StatusCode::NOT_FOUND => {
                    return Err(kinded(
                        ErrorKind::NotFound,
                        format!("the registry {} has no {}", self.registry(), self.target),
                    ));
                }
                s => {
                    return Err(kinded(
                        ErrorKind::Internal,
                        format!("the registry {} answered {s} for {}", self.registry(), self.target),
                    ));
                }
            }
        }
    }

    /// Sends GET `url`, following at most [`MAX_REDIRECTS`] redirects: each
    /// must be allowed ([`Self::may_go`]), and only a request to the
    /// registry itself carries the login or its token.
    async fn follow(&self, mut url: Url, accept: &str) -> anyhow::Result<(reqwest::Response, Url)> {
        for _ in 0..=MAX_REDIRECTS {
            self.may_go(&url, "a redirect to")?;
            let mut request = self.http.get(url.clone()).header(ACCEPT, accept);
            if self.is_registry(&url) {
                request = match &self.auth {
                    Auth::None => request,
                    Auth::Basic => self.with_login(request),
                    Auth::Bearer(token) => request.bearer_auth(token),
                };
            }
            let response = request.send().await.map_err(|e| self.unreachable(&e))?;
            if !response.status().is_redirection() {
                return Ok((response, url));
            }
            let next = response.headers().get(LOCATION).and_then(|l| l.to_str().ok()).and_then(|l| url.join(l).ok());
            url = next.ok_or_else(|| {
                refused(format!("the registry {} answered a redirect to nowhere for {}", self.registry(), self.target))
            })?;
        }
        Err(refused(format!(
            "the registry {} redirected {} more than {MAX_REDIRECTS} times",
            self.registry(),
            self.target
        )))
    }

    fn with_login(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.login {
            Some(l) => request.basic_auth(&l.user, Some(&l.password)),
            None => request,
        }
    }

    /// Answers the registry's challenge: Basic with the login (to the
    /// registry itself), or a Bearer token from the realm it names, asked
    /// with the login only where the login may go.
    async fn log_in(&mut self, challenge: &str) -> anyhow::Result<()> {
        let challenges = http_auth::parse_challenges(challenge).unwrap_or_default();
        if let Some(bearer) = challenges.iter().find(|c| c.scheme.eq_ignore_ascii_case("bearer")) {
            let param =
                |name: &str| bearer.params.iter().find(|p| p.0.eq_ignore_ascii_case(name)).map(|p| p.1.to_unescaped());
            let realm = param("realm").ok_or_else(|| self.refused_access())?;
            let realm = Url::parse(&realm).map_err(|_| {
                refused(format!(
                    "the registry {} named a login address that is no address ({})",
                    self.registry(),
                    crate::elsewhere::named(&realm)
                ))
            })?;
            self.may_go(&realm, "you to log in at")?;
            let scope =
                param("scope").unwrap_or_else(|| format!("repository:{}:pull", self.target.reference.repository()));
            let mut url = realm.clone();
            url.query_pairs_mut().append_pair("scope", &scope);
            if let Some(service) = param("service") {
                url.query_pairs_mut().append_pair("service", &service);
            }
            // No redirect is followed here: the login goes to the realm alone.
            let mut request = self.http.get(url);
            if realm.scheme() == "https" || self.is_registry(&realm) {
                request = self.with_login(request);
            }
            let response = request.send().await.map_err(|e| self.unreachable(&e))?;
            if !response.status().is_success() {
                return Err(self.refused_access());
            }
            let body = bounded(response, MAX_TOKEN, "a login token", self.registry()).await?;
            let answer: serde_json::Value = serde_json::from_slice(&body).map_err(|_| self.refused_access())?;
            let token = answer
                .get("token")
                .or_else(|| answer.get("access_token"))
                .and_then(serde_json::Value::as_str)
                .ok_or_else(|| self.refused_access())?;
            self.auth = Auth::Bearer(token.to_string());
            return Ok(());
        }
        if challenges.iter().any(|c| c.scheme.eq_ignore_ascii_case("basic")) && self.login.is_some() {
            self.auth = Auth::Basic;
            return Ok(());
        }
        Err(self.refused_access())
    }

    fn refused_access(&self) -> anyhow::Error {
        let registry = self.registry();
        kinded(
            ErrorKind::Denied,
            format!(
                "the registry {registry} refused you access to {}: log in with `docker login {registry}` or `skopeo login {registry}`, then try again",
                self.target
            ),
        )
    }

    fn unreachable(&self, e: &reqwest::Error) -> anyhow::Error {
        kinded(
            ErrorKind::Internal,
            format!(
                "cannot reach the registry {}: {}",
                self.registry(),
                text::cut(&text::one_line(&source_chain(e)), 300)
            ),
        )
    }
}

/// Fetches the package `target` names with the host's own client
/// (the [`Pull`] of this module: the manifest at most `pull::MAX_MANIFEST` bytes, the
/// login only where it belongs): its manifest, then its one layer, at most
/// `max` bytes, hashed as it arrives and compared with the digest the
/// manifest names.
pub async fn fetch(
    target: &Target,
    max: u64,
    progress: &(dyn Fn(&str) + Sync),
) -> anyhow::Result<super::registry::Fetched> {
    let login = match super::registry::auth(target.registry(), progress) {
        oci_client::secrets::RegistryAuth::Basic(user, password) => Some(Login { user, password }),
        _ => None,
    };
    let mut pull = Pull::new(target, login)?;
    progress(&format!("asking the registry {} for {target}", target.registry()));
    let read = pull.manifest().await?;
    let manifest = super::registry::manifest_of(target, &read.bytes)?;
    let digest = read.digest;
    let layer = super::registry::check_manifest(target, &manifest, max)?;
    let size = layer.size as u64;
    progress(&format!("its manifest ({digest}) names one layer of {size} bytes; fetching it"));
    let mut response = pull.blob(&layer.digest).await?;
    if response.content_length().is_some_and(|n| n > size) {
        return Err(refused(format!(
            "the registry {} sent more of {target} than the {size} bytes its manifest names",
            target.registry()
        )));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    let mut hasher = sha2::Sha256::new();
    let mut failed = None;
    let mut told = std::time::Instant::now();
    loop {
        match response.chunk().await {
            Ok(Some(c)) => {
                if bytes.len() as u64 + c.len() as u64 > size {
                    return Err(refused(format!(
                        "the registry {} sent more of {target} than the {size} bytes its manifest names",
                        target.registry()
                    )));
                }
                hasher.update(&c);
                bytes.extend_from_slice(&c);
                // A line a second at most while it comes: a slow registry is
                // seen to be slow, not taken for a hung install.
                if told.elapsed() >= PROGRESS_EVERY && (bytes.len() as u64) < size {
                    told = std::time::Instant::now();
                    progress(&format!("received {} of {size} bytes", bytes.len()));
                }
            }
            Ok(None) => break,
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let got = format!("sha256:{}", hex::encode(hasher.finalize()));
    // Our own hash first: a lying blob gets this sentence whichever way the
    // reading noticed it.
    if bytes.len() as u64 == size && got != layer.digest {
        return Err(refused(format!(
            "the registry {} served a layer of {target} whose digest ({got}) differs from the one its manifest names ({}); nothing was placed",
            target.registry(),
            layer.digest
        )));
    }
    if let Some(e) = failed {
        return Err(kinded(
            ErrorKind::Internal,
            format!("fetching {target} failed: {}", text::cut(&text::one_line(&source_chain(&e)), 300)),
        ));
    }
    if bytes.len() as u64 != size {
        return Err(refused(format!(
            "the registry {} sent {} bytes of {target}, and its manifest names {size}",
            target.registry(),
            bytes.len()
        )));
    }
    progress(&format!("received all {size} bytes, and their digest is the one the manifest names"));
    Ok(super::registry::Fetched { bytes, digest })
}

/// The header in which a registry states a manifest's digest.
const DOCKER_CONTENT_DIGEST: &str = "docker-content-digest";

/// Whether the digest `said` (`sha256:…` or `sha512:…`, as OCI names them)
/// is the digest of `bytes`; any other algorithm, or a malformed one, is not.
fn same_digest(said: &str, bytes: &[u8]) -> bool {
    match said.trim().split_once(':') {
        Some(("sha256", hex)) => hex == hex::encode(sha2::Sha256::digest(bytes)),
        Some(("sha512", hex)) => hex == hex::encode(sha2::Sha512::digest(bytes)),
        _ => false,
    }
}

/// Whether `url` is at the place `registry` (`host` or `host:port`, as a
/// reference names a registry) names: the same host in any case, the same
/// port, a default port written or not.
fn same_place(url: &Url, registry: &str) -> bool {
    let Ok(named) = Url::parse(&format!("{}://{registry}/", url.scheme())) else { return false };
    let host = |u: &Url| u.host_str().map(str::to_ascii_lowercase);
    host(url).is_some() && host(url) == host(&named) && url.port_or_known_default() == named.port_or_known_default()
}

/// The body of `response`, at most `max` bytes: a longer one (by its
/// declared length, or as it arrives) is refused before it is held.
pub async fn bounded(mut response: reqwest::Response, max: u64, what: &str, registry: &str) -> anyhow::Result<Vec<u8>> {
    let too_long =
        || refused(format!("the registry {registry} sent {what} longer than {max} bytes; nothing was placed"));
    let declared = response.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(too_long());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| {
        kinded(
            ErrorKind::Internal,
            format!("reading {what} from the registry {registry} failed: {}", text::one_line(&source_chain(&e))),
        )
    })? {
        if body.len() as u64 + chunk.len() as u64 > max {
            return Err(too_long());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};
    use std::sync::{Arc, Mutex};

    /// A server on `ip` answering each request with `answer(head)`, keeping
    /// every request's head.
    fn server(ip: &str, answer: impl Fn(&str) -> String + Send + Sync + 'static) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let (kept, answer) = (heads.clone(), Arc::new(answer));
        std::thread::spawn(move || {
            for stream in listener.incoming().take(16) {
                let Ok(mut s) = stream else { continue };
                let mut buf = vec![0u8; 16 << 10];
                let n = s.read(&mut buf).unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                kept.lock().unwrap().push(head.clone());
                // One request a connection: the client opens another.
                let reply = answer(&head).replacen("\r\n", "\r\nConnection: close\r\n", 1);
                let _ = s.write_all(reply.as_bytes());
            }
        });
        (addr, heads)
    }

    fn with_login(reference: &str) -> Pull<'static> {
        let target = Box::leak(Box::new(super::super::registry::parse(reference).unwrap()));
        Pull::new(target, Some(Login { user: "ada".into(), password: "s3cret".into() })).unwrap()
    }

    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
    }

    #[test]
    fn the_login_goes_to_the_registry_named_and_never_to_a_plain_http_realm_or_redirect_elsewhere() {
        let manifest = r#"{"schemaVersion": 2}"#;
        // A realm on another host in plain HTTP: refused, never asked.
        let (elsewhere, asked) =
            server("127.0.0.2", |_| "HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n{\"token\":\"t\"}".into());
        let realm = format!("http://{elsewhere}/token");
        let (registry, _) = server("127.0.0.1", move |_| {
            format!(
                "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"{realm}\"\r\nContent-Length: 0\r\n\r\n"
            )
        });
        let e = run(with_login(&format!("{registry}/ada/notes:1")).manifest()).err().unwrap().to_string();
        assert!(e.contains("you to log in at") && e.contains("over plain HTTP"), "{e}");
        // A redirect to another host in plain HTTP: refused, never followed.
        let to = format!("http://{elsewhere}/v2/ada/notes/manifests/1");
        let (redirecting, _) = server("127.0.0.1", move |_| {
            format!("HTTP/1.1 307 Temporary Redirect\r\nLocation: {to}\r\nContent-Length: 0\r\n\r\n")
        });
        let e = run(with_login(&format!("{redirecting}/ada/notes:1")).manifest()).err().unwrap().to_string();
        assert!(e.contains("a redirect to") && e.contains("over plain HTTP"), "{e}");
        assert!(asked.lock().unwrap().is_empty(), "nothing went to 127.0.0.2");
        // A realm on the registry itself gets the login, and the token goes
        // back to the registry alone.
        let (this, heads) = server("127.0.0.1", move |head| {
            let first = head.lines().next().unwrap_or_default().to_string();
            if first.contains("/token") {
                "HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n{\"token\":\"tok\"}".into()
            } else if head.contains("Bearer tok") {
                format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{manifest}", manifest.len())
            } else {
                // The realm is this very server: its address comes from the request.
                let host =
                    head.lines().find_map(|l| l.strip_prefix("host: ").or(l.strip_prefix("Host: "))).unwrap_or("");
                format!(
                    "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"http://{host}/token\",service=\"s\"\r\nContent-Length: 0\r\n\r\n"
                )
            }
        });
        let got = run(with_login(&format!("{this}/ada/notes:1")).manifest()).unwrap();
        assert_eq!(got.bytes, manifest.as_bytes());
        assert_eq!(got.digest, format!("sha256:{}", hex::encode(sha2::Sha256::digest(manifest.as_bytes()))));
        let heads = heads.lock().unwrap();
        let token = heads.iter().find(|h| h.lines().next().unwrap().contains("/token")).unwrap();
        assert!(
            token.contains("YWRhOnMzY3JldA==") && token.contains("scope=repository%3Aada%2Fnotes%3Apull"),
            "{token}"
        );
    }

    /// A registry that refuses the login it asked for is asked once, not
    /// again and again: the person hears they were refused.
    #[test]
    fn a_registry_that_refuses_the_login_is_asked_once() {
        let (registry, heads) = server("127.0.0.1", |_| {
            "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"r\"\r\nContent-Length: 0\r\n\r\n".into()
        });
        let e = run(with_login(&format!("{registry}/ada/notes:1")).manifest()).err().unwrap().to_string();
        assert!(e.contains("refused you access") && e.contains("docker login"), "{e}");
        let heads = heads.lock().unwrap();
        assert_eq!(heads.len(), 2, "once without the login, once with it: {heads:?}");
        assert!(!heads[0].contains("Basic ") && heads[1].contains("Basic YWRhOnMzY3JldA=="), "{heads:?}");
        // Without a login there is nothing to answer a Basic challenge with.
        let (registry, heads) = server("127.0.0.1", |_| {
            "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"r\"\r\nContent-Length: 0\r\n\r\n".into()
        });
        let e = run(pull(&format!("{registry}/ada/notes:1")).manifest()).err().unwrap().to_string();
        assert!(e.contains("refused you access"), "{e}");
        assert_eq!(heads.lock().unwrap().len(), 1);
    }

    /// A Wasm artifact's manifest naming `blob` as its one layer.
    fn manifest_of(blob: &[u8]) -> String {
        use oci_wasm::{WASM_LAYER_MEDIA_TYPE, WASM_MANIFEST_CONFIG_MEDIA_TYPE, WASM_MANIFEST_MEDIA_TYPE};
        let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(blob)));
        serde_json::json!({
            "schemaVersion": 2,
            "mediaType": WASM_MANIFEST_MEDIA_TYPE,
            "config": { "mediaType": WASM_MANIFEST_CONFIG_MEDIA_TYPE, "digest": format!("sha256:{}", "0".repeat(64)), "size": 2 },
            "layers": [{ "mediaType": WASM_LAYER_MEDIA_TYPE, "digest": digest, "size": blob.len() }],
        })
        .to_string()
    }

    /// The layer as the manifest names it, or a sentence: more bytes than it
    /// names (declared, or as they arrive), fewer, or other bytes.
    #[test]
    fn a_layer_is_taken_only_as_its_manifest_names_it() {
        let blob = b"the package's bytes".to_vec();
        let manifest = manifest_of(&blob);
        let fetch_with = |layer: &'static str| {
            let manifest = manifest.clone();
            let (registry, _) = server("127.0.0.1", move |head| {
                if head.lines().next().unwrap_or_default().contains("/manifests/") {
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{manifest}", manifest.len())
                } else {
                    layer.to_string()
                }
            });
            let target = super::super::registry::parse(&format!("{registry}/ada/notes:1")).unwrap();
            let said = Mutex::new(Vec::new());
            let got = run(fetch(&target, 1 << 20, &|l| said.lock().unwrap().push(l.to_string())));
            got.map(|g| (g, said.into_inner().unwrap())).map_err(|e| format!("{e:#}"))
        };
        let (got, said) = fetch_with("HTTP/1.1 200 OK\r\nContent-Length: 19\r\n\r\nthe package's bytes").unwrap();
        assert_eq!(got.bytes, blob);
        // Issue 73, point 3: what it is doing is said as it goes.
        assert!(said[0].starts_with("asking the registry 127.0.0.1:"), "{said:?}");
        assert!(said[1].contains("names one layer of 19 bytes"), "{said:?}");
        assert!(said.last().unwrap().contains("received all 19 bytes"), "{said:?}");
        assert_eq!(got.digest, format!("sha256:{}", hex::encode(sha2::Sha256::digest(manifest.as_bytes()))));
        let said = |layer| fetch_with(layer).err().unwrap();
        assert!(said("HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\nthe package's bytes!").contains("sent more of"));
        assert!(said("HTTP/1.1 200 OK\r\n\r\nthe package's bytes and more").contains("sent more of"));
        assert!(
            said("HTTP/1.1 200 OK\r\nContent-Length: 19\r\n\r\nthe package's BYTES")
                .contains("differs from the one its manifest names")
        );
        assert!(said("HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nthe pac").contains("sent 7 bytes"));
    }

    /// Issue 73, point 3: a layer that comes slowly is said as it comes, a
    /// line a second at most, none for its last part however late it comes
    /// (the end has a line of its own).
    #[test]
    fn a_slow_layer_is_said_as_it_comes() {
        let blob = b"the package's bytes".to_vec();
        let manifest = manifest_of(&blob);
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let registry = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for stream in listener.incoming().take(2) {
                let Ok(mut s) = stream else { continue };
                let mut buf = vec![0u8; 16 << 10];
                let n = s.read(&mut buf).unwrap_or(0);
                if String::from_utf8_lossy(&buf[..n]).contains("/manifests/") {
                    let _ = write!(
                        s,
                        "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{manifest}",
                        manifest.len()
                    );
                    continue;
                }
                // Three parts, each more than a second after the one before.
                let _ = write!(s, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 19\r\n\r\nthe pa");
                let _ = s.flush();
                std::thread::sleep(std::time::Duration::from_millis(1300));
                let _ = s.write_all(b"ckage's ");
                let _ = s.flush();
                std::thread::sleep(std::time::Duration::from_millis(1300));
                let _ = s.write_all(b"bytes");
            }
        });
        let target = super::super::registry::parse(&format!("{registry}/ada/notes:1")).unwrap();
        let said = Mutex::new(Vec::new());
        let got = run(fetch(&target, 1 << 20, &|l| said.lock().unwrap().push(l.to_string()))).unwrap();
        assert_eq!(got.bytes, blob);
        let said = said.into_inner().unwrap();
        assert_eq!(said.len(), 4, "{said:?}");
        assert_eq!(said[2], "received 14 of 19 bytes", "{said:?}");
    }

    /// `bounded` at its very bound: exactly `max` bytes pass, one more is
    /// refused, whether it was declared or arrives in one piece.
    #[test]
    fn a_body_of_exactly_its_bound_passes_and_one_byte_more_does_not() {
        let answer = |len: usize, declared: bool| {
            let mut r = http::Response::builder();
            if declared {
                r = r.header(CONTENT_LENGTH, len);
            }
            reqwest::Response::from(r.body(vec![b'x'; len]).unwrap())
        };
        for declared in [true, false] {
            assert_eq!(run(bounded(answer(8, declared), 8, "it", "r")).unwrap().len(), 8);
            let e = run(bounded(answer(9, declared), 8, "it", "r")).unwrap_err().to_string();
            assert!(e.contains("it longer than 8 bytes"), "{declared}: {e}");
        }
    }

    #[test]
    fn a_manifest_longer_than_the_bound_is_refused_declared_or_not() {
        for declared in [true, false] {
            let (registry, _) = server("127.0.0.1", move |_| {
                let body = " ".repeat(MAX_MANIFEST as usize + 1);
                match declared {
                    true => format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len()),
                    false => format!("HTTP/1.1 200 OK\r\n\r\n{body}"),
                }
            });
            let e = run(with_login(&format!("{registry}/ada/notes:1")).manifest()).err().unwrap().to_string();
            assert!(e.contains(&format!("its manifest longer than {MAX_MANIFEST} bytes")), "{declared}: {e}");
        }
        // A digest reference the manifest does not hash to.
        let (registry, _) = server("127.0.0.1", |_| "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}".into());
        let digest = format!("sha256:{}", "0".repeat(64));
        let e = run(with_login(&format!("{registry}/ada/notes@{digest}")).manifest()).err().unwrap().to_string();
        assert!(e.contains("digest that does not match"), "{e}");
    }

    /// Issue 73, point 2: the digest a registry states for a manifest
    /// (`Docker-Content-Digest`) must be the manifest's; a registry whose
    /// word does not hold is refused, as oci-client refused it.
    #[test]
    fn a_registry_whose_stated_digest_lies_is_refused() {
        let body = r#"{"schemaVersion": 2}"#;
        let sha256 = format!("sha256:{}", hex::encode(sha2::Sha256::digest(body.as_bytes())));
        let sha512 = format!("sha512:{}", hex::encode(sha2::Sha512::digest(body.as_bytes())));
        let with = |header: Option<String>| {
            let (registry, _) = server("127.0.0.1", move |_| {
                let h = header.as_ref().map(|d| format!("Docker-Content-Digest: {d}\r\n")).unwrap_or_default();
                format!("HTTP/1.1 200 OK\r\n{h}Content-Length: {}\r\n\r\n{body}", body.len())
            });
            run(pull(&format!("{registry}/ada/notes:1")).manifest()).map(|m| m.digest).map_err(|e| e.to_string())
        };
        assert_eq!(with(None), Ok(sha256.clone()));
        assert_eq!(with(Some(sha256.clone())), Ok(sha256.clone()));
        assert_eq!(with(Some(sha512)), Ok(sha256.clone()));
        for lie in [format!("sha256:{}", "0".repeat(64)), "md5:abc".to_string(), "nonsense".to_string()] {
            let e = with(Some(lie.clone())).unwrap_err();
            assert!(e.contains("with a digest that does not match") && e.contains("nothing was placed"), "{lie}: {e}");
        }
    }

    fn pull(reference: &str) -> Pull<'static> {
        let target = Box::leak(Box::new(super::super::registry::parse(reference).unwrap()));
        Pull::new(target, None).unwrap()
    }

    #[test]
    fn plain_http_goes_only_to_the_loopback_registry_named_and_https_anywhere() {
        let p = pull("127.0.0.1:5000/ada/notes:1.0");
        for ok in ["http://127.0.0.1:5000/v2/x", "https://auth.example/token", "https://127.0.0.2:5001/token"] {
            assert!(p.may_go(&Url::parse(ok).unwrap(), "to").is_ok(), "{ok}");
        }
        for no in
            ["http://127.0.0.2:5001/token", "http://127.0.0.1:5001/token", "http://localhost:5000/v2/x", "ftp://x/y"]
        {
            let e = p.may_go(&Url::parse(no).unwrap(), "you to log in at").unwrap_err().to_string();
            assert!(e.contains("over plain HTTP"), "{no}: {e}");
        }
        let p = pull("ghcr.io/ada/notes:1.0");
        assert!(p.may_go(&Url::parse("http://ghcr.io/v2/x").unwrap(), "to").is_err(), "HTTPS only elsewhere");
        assert!(p.is_registry(&Url::parse("https://ghcr.io/v2/x").unwrap()));
        assert!(!p.is_registry(&Url::parse("https://ghcr.io.evil/v2/x").unwrap()));
        assert!(!p.is_registry(&Url::parse("https://ghcr.io:444/v2/x").unwrap()));
        // The place as named: any case, a default port written or not.
        assert!(pull("GHCR.io:443/ada/notes:1.0").is_registry(&Url::parse("https://ghcr.io/v2/x").unwrap()));
        assert!(pull("127.0.0.1:80/ada/notes:1.0").is_registry(&Url::parse("http://127.0.0.1/v2/x").unwrap()));
        let p = pull("LocalHost:5000/ada/notes:1.0");
        assert!(p.may_go(&Url::parse("http://localhost:5000/v2/x").unwrap(), "to").is_ok());
    }
}
