//! The OCI registry: `autoapp publish` pushes a package as a standard Wasm
//! OCI artifact, `autoapp install registry/repository:tag` fetches one.
//!
//! The artifact is what the CNCF's Wasm OCI artifact layout names, made with
//! `oci-wasm`'s types: a manifest of media type
//! `application/vnd.oci.image.manifest.v1+json`, a config of
//! `application/vnd.wasm.config.v0+json` (the component's imports and
//! exports, the layer's digest) and exactly one `application/wasm` layer —
//! the packed file itself, so `wkg oci pull`, `oras` and `skopeo` get it byte
//! for byte. `org.opencontainers.image.*` annotations name the app.
//!
//! What a registry answers is input an attacker wrote. A fetch is the host's
//! own pull ([`super::pull`]: a manifest of at most 4 MiB, the person's login
//! only to the registry they named or its realm over HTTPS, no plain HTTP
//! but to that loopback registry), and refuses, each with one sentence: a
//! manifest that is not that layout (another media type, more or fewer than
//! one layer, an index), a layer larger than the package limit (before a
//! byte of it is read, and again while it is read), a layer whose bytes do
//! not hash to the digest its manifest names, and a manifest that does not
//! hash to the digest a `…@sha256:` reference names. Then the bytes go
//! through the same checks as a file ([`super::install`]). `publish` pushes
//! with oci-client.
//!
//! Credentials come from the person's registry login only — the file
//! `docker login` writes (`$DOCKER_CONFIG/config.json` or
//! `~/.docker/config.json`, with its credential helpers), then the one
//! `podman login`/`skopeo login` write (`$REGISTRY_AUTH_FILE` or
//! `$XDG_RUNTIME_DIR/containers/auth.json`) — never from a workspace, and
//! never in a build's sight (builds run with a cleared environment and
//! without the home folder). A registry on a loopback address is spoken to
//! over plain HTTP, as container tools do; any other only over HTTPS.

use std::collections::BTreeMap;
use std::time::Duration;

use oci_client::Reference;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::OciImageManifest;
use oci_client::secrets::RegistryAuth;
use oci_wasm::{
    WASM_LAYER_MEDIA_TYPE, WASM_MANIFEST_CONFIG_MEDIA_TYPE, WASM_MANIFEST_MEDIA_TYPE, WasmClient, WasmConfig,
};

use super::install::refused;
use crate::elsewhere::text;
use crate::error::{ErrorKind, kinded};

/// The longest reference Autoapp reads.
pub const MAX_REFERENCE: usize = 512;

/// A registry reference the person wrote: `registry/repository:tag` or
/// `registry/repository@sha256:…`, the registry always named.
#[derive(Debug, Clone)]
pub struct Target {
    pub reference: Reference,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reference.whole())
    }
}

impl Target {
    /// The registry's host (and port).
    pub fn registry(&self) -> &str {
        self.reference.registry()
    }
}

/// Reads `text` as a registry reference. The registry must be named (its
/// first part has a dot or a port, or is `localhost`): a bare
/// `repository:tag` would silently mean Docker Hub.
pub fn parse(input: &str) -> Result<Target, String> {
    let shown = crate::elsewhere::named(input);
    if input.len() > MAX_REFERENCE {
        return Err(format!("{shown} is longer than {MAX_REFERENCE} characters; it is no registry reference"));
    }
    let (first, rest) = match input.split_once('/') {
        Some(parts) => parts,
        None => {
            return Err(format!(
                "{shown} is neither a package file nor a registry reference (registry/repository:tag, e.g. ghcr.io/you/notes:1.0)"
            ));
        }
    };
    if rest.is_empty() || !(first.contains('.') || first.contains(':') || first == "localhost") {
        return Err(format!(
            "{shown} does not name a registry: write registry/repository:tag (e.g. ghcr.io/you/notes:1.0 or 127.0.0.1:5000/notes:1.0)"
        ));
    }
    let reference: Reference = input.parse().map_err(|e: oci_client::ParseError| {
        format!("{shown} is not a registry reference: {}", text::one_line(&e.to_string()))
    })?;
    // A reference without one means `latest` to the parser: name it instead.
    if !rest.rsplit('/').next().is_some_and(|last| last.contains(':')) && !rest.contains('@') {
        return Err(format!("{shown} names no tag: add one (…:1.0) or a digest (…@sha256:…)"));
    }
    Ok(Target { reference })
}

/// Whether `registry` (a host, with an optional port) is a loopback address,
/// spoken to over plain HTTP.
pub fn is_loopback(registry: &str) -> bool {
    let host = if let Some(rest) = registry.strip_prefix('[') {
        rest.split_once(']').map_or(rest, |(h, _)| h)
    } else {
        registry.rsplit_once(':').map_or(registry, |(h, _)| h)
    };
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|a| a.is_loopback())
}

fn client(target: &Target) -> WasmClient {
    // reqwest's rustls needs a process-wide provider: ring, the one the rest
    // of the host uses. Installing twice is harmless (the first one stays).
    let _ = rustls::crypto::ring::default_provider().install_default();
    WasmClient::new(oci_client::Client::new(client_config(target)))
}

/// How `publish` speaks to the registry of `target`: HTTPS (plain HTTP only
/// to a loopback registry), no index resolved to one of its images, bounded
/// waits, our name.
fn client_config(target: &Target) -> ClientConfig {
    let protocol = if is_loopback(target.registry()) {
        ClientProtocol::HttpsExcept(vec![target.registry().to_string()])
    } else {
        ClientProtocol::Https
    };
    ClientConfig {
        protocol,
        // An index (several platforms) is no Wasm artifact: refuse it.
        platform_resolver: None,
        connect_timeout: Some(Duration::from_secs(15)),
        read_timeout: Some(Duration::from_secs(60)),
        user_agent: concat!("autoapp/", env!("CARGO_PKG_VERSION")),
        ..ClientConfig::default()
    }
}

/// The person's login for `registry`, if they have one; said in `note`.
pub(super) fn auth(registry: &str, note: &(dyn Fn(&str) + Sync)) -> RegistryAuth {
    use docker_credential::DockerCredential;
    let found =
        docker_credential::get_credential(registry).or_else(|_| docker_credential::get_podman_credential(registry));
    match found {
        Ok(DockerCredential::UsernamePassword(user, password)) => {
            note(&format!("using your login to {registry} as {}", crate::elsewhere::named(&user)));
            RegistryAuth::Basic(user, password)
        }
        Ok(DockerCredential::IdentityToken(_)) => {
            note(&format!(
                "your login to {registry} is an identity token, which Autoapp cannot use; going on without a login"
            ));
            RegistryAuth::Anonymous
        }
        Err(_) => RegistryAuth::Anonymous,
    }
}

/// One sentence for what the registry (or the way to it) answered.
fn registry_error(target: &Target, e: &OciDistributionError) -> anyhow::Error {
    let registry = target.registry();
    let login = format!("log in with `docker login {registry}` or `skopeo login {registry}`, then try again");
    let not_found = || kinded(ErrorKind::NotFound, format!("the registry {registry} has no {target}"));
    let refused =
        || kinded(ErrorKind::Denied, format!("the registry {registry} refused you access to {target}: {login}"));
    match e {
        OciDistributionError::RequestError(r) if r.is_connect() || r.is_timeout() => kinded(
            ErrorKind::Internal,
            format!("cannot reach the registry {registry}: {}", text::one_line(&source_chain(r))),
        ),
        OciDistributionError::ImageManifestNotFoundError(_) => not_found(),
        OciDistributionError::UnauthorizedError { .. } | OciDistributionError::AuthenticationFailure(_) => refused(),
        OciDistributionError::RegistryError { envelope, .. } => {
            let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
            if codes.iter().any(|c| {
                matches!(
                    c,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::NotFound
                        | OciErrorCode::BlobUnknown
                )
            }) {
                not_found()
            } else if codes.iter().any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied)) {
                refused()
            } else {
                answered(registry, e)
            }
        }
        OciDistributionError::ServerError { code: 404, .. } => not_found(),
        OciDistributionError::ServerError { code: 401 | 403, .. } => refused(),
        OciDistributionError::ImageIndexParsingNoPlatformResolverError => kinded(
            ErrorKind::Denied,
            format!("{target} is an index of several images, not a Wasm package: name the package's own tag or digest"),
        ),
        OciDistributionError::DigestError(d) => kinded(
            ErrorKind::Denied,
            format!(
                "the registry {registry} served {target} with a digest that does not match: {}",
                text::one_line(&d.to_string())
            ),
        ),
        _ => answered(registry, e),
    }
}

fn answered(registry: &str, e: &OciDistributionError) -> anyhow::Error {
    kinded(
        ErrorKind::Internal,
        format!("the registry {registry} answered: {}", text::cut(&text::one_line(&source_chain(e)), 300)),
    )
}

/// An error and its causes, on one line.
pub(super) fn source_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        next = cause.source();
    }
    s
}

/// What `publish` pushed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Published {
    /// The reference as the person gave it.
    pub reference: String,
    /// The manifest's digest: `registry/repository@<digest>` names exactly
    /// these bytes.
    pub digest: String,
    /// The layer's digest (the SHA-256 of the packed file).
    pub layer: String,
}

/// Pushes `package` (a packed file) to `target` as a Wasm OCI artifact with
/// `annotations` on its manifest.
pub async fn publish(
    target: &Target,
    package: Vec<u8>,
    annotations: BTreeMap<String, String>,
    author: Option<String>,
    progress: &(dyn Fn(&str) + Sync),
) -> anyhow::Result<Published> {
    let client = client(target);
    let auth = auth(target.registry(), progress);
    let (config, layer) = WasmConfig::from_raw_component(package, author)
        .map_err(|e| anyhow::anyhow!("the package is no component oci-wasm can describe: {e:#}"))?;
    let layer_digest = config.layer_digests.first().cloned().unwrap_or_default();
    progress(&format!("pushing {} bytes to {target}", layer.data.len()));
    client.push(&target.reference, &auth, layer, config, Some(annotations)).await.map_err(|e| {
        match e.downcast_ref::<OciDistributionError>() {
            Some(o) => registry_error(target, o),
            None => anyhow::anyhow!("cannot push to {target}: {}", text::one_line(&format!("{e:#}"))),
        }
    })?;
    let digest =
        client.fetch_manifest_digest(&target.reference, &auth).await.map_err(|e| registry_error(target, &e))?;
    Ok(Published { reference: target.to_string(), digest, layer: layer_digest })
}

/// What a fetch read.
#[derive(Debug)]
pub struct Fetched {
    pub bytes: Vec<u8>,
    /// The manifest's digest.
    pub digest: String,
}

/// Checks that `manifest` is the Wasm artifact layout with one layer of at
/// most `max` bytes, and returns that layer.
pub fn check_manifest(
    target: &Target,
    manifest: &OciImageManifest,
    max: u64,
) -> anyhow::Result<oci_client::manifest::OciDescriptor> {
    let not = |why: String| refused(format!("{target} is not a Wasm package: {why}"));
    if let Some(m) = &manifest.media_type
        && m != WASM_MANIFEST_MEDIA_TYPE
    {
        return Err(not(format!("its manifest is {}", crate::elsewhere::named(m))));
    }
    if manifest.config.media_type != WASM_MANIFEST_CONFIG_MEDIA_TYPE {
        return Err(not(format!(
            "its config is {}, not {WASM_MANIFEST_CONFIG_MEDIA_TYPE}",
            crate::elsewhere::named(&manifest.config.media_type)
        )));
    }
    let [layer] = manifest.layers.as_slice() else {
        return Err(not(format!("it has {} layers, and a Wasm package has exactly one", manifest.layers.len())));
    };
    if layer.media_type != WASM_LAYER_MEDIA_TYPE {
        return Err(not(format!(
            "its layer is {}, not {WASM_LAYER_MEDIA_TYPE}",
            crate::elsewhere::named(&layer.media_type)
        )));
    }
    // It becomes part of an address the login may go to: hex, nothing else.
    let hex = layer.digest.strip_prefix("sha256:").unwrap_or_default();
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(not(format!("its layer's digest {} is not a SHA-256", crate::elsewhere::named(&layer.digest))));
    }
    let size = u64::try_from(layer.size).unwrap_or(u64::MAX);
    if size > max {
        return Err(refused(format!(
            "{target} is {size} bytes; a package may be at most {max} bytes (package_max_mib)"
        )));
    }
    Ok(layer.clone())
}

/// The manifest in `bytes`: an image manifest, or the sentence (an index of
/// several images is named as one).
pub(super) fn manifest_of(target: &Target, bytes: &[u8]) -> anyhow::Result<OciImageManifest> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|_| refused(format!("{target} is not a Wasm package: its manifest is not JSON")))?;
    let media = value.get("mediaType").and_then(serde_json::Value::as_str).unwrap_or_default();
    if media.contains("index") || media.contains("manifest.list") || value.get("manifests").is_some() {
        return Err(kinded(
            ErrorKind::Denied,
            format!("{target} is an index of several images, not a Wasm package: name the package's own tag or digest"),
        ));
    }
    serde_json::from_value(value).map_err(|e| {
        refused(format!(
            "{target} is not a Wasm package: its manifest is not an image manifest ({})",
            text::one_line(&e.to_string())
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_must_name_its_registry_and_a_tag_or_digest() {
        for ok in [
            "127.0.0.1:5000/notes:1.0",
            "localhost/notes:1",
            "ghcr.io/you/notes:1.0",
            "ghcr.io/you/notes@sha256:0000000000000000000000000000000000000000000000000000000000000000",
        ] {
            assert!(parse(ok).is_ok(), "{ok}: {:?}", parse(ok).err());
            // Said back whole, as the person wrote it (every sentence names it so).
            assert_eq!(parse(ok).unwrap().to_string(), ok);
        }
        for (bad, says) in [
            ("notes:1.0", "neither a package file"),
            ("you/notes:1.0", "does not name a registry"),
            ("ghcr.io/", "does not name a registry"),
            ("ghcr.io/you/notes", "names no tag"),
            ("ghcr.io/You/Notes:1", "not a registry reference"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let long = format!("ghcr.io/{}:1", "a".repeat(MAX_REFERENCE));
        assert!(parse(&long).unwrap_err().contains("longer than"));
        let most = format!("ghcr.io/{}:1", "a".repeat(MAX_REFERENCE - "ghcr.io/:1".len()));
        assert_eq!(most.len(), MAX_REFERENCE);
        assert!(!parse(&most).unwrap_err().contains("longer than"), "{:?}", parse(&most).err());
    }

    /// A manifest is an image manifest or a sentence: an index (by its media
    /// type, a Docker list, or a `manifests` list) is named as one; what is
    /// not JSON, or not a manifest, is refused.
    #[test]
    fn a_manifest_is_read_as_an_image_manifest_or_refused() {
        let target = parse("127.0.0.1:5000/ada/notes:1").unwrap();
        let said = |text: &str| manifest_of(&target, text.as_bytes()).map(|_| ()).map_err(|e| e.to_string());
        for index in [
            r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#,
            r#"{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.list.v2+json"}"#,
            r#"{"schemaVersion":2,"manifests":[]}"#,
        ] {
            assert!(said(index).unwrap_err().contains("is an index of several images"), "{index}");
        }
        assert!(said("not json").unwrap_err().contains("its manifest is not JSON"));
        assert!(said(r#"{"schemaVersion":2}"#).unwrap_err().contains("is not an image manifest"));
        let good = r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"c","digest":"sha256:00","size":1},"layers":[]}"#;
        assert_eq!(said(good), Ok(()));
        // An error is said with every cause after it, on one line.
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("the registry went away")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let outer = Outer(std::io::Error::other("the cause"));
        assert_eq!(source_chain(&outer), "the registry went away: the cause");
    }

    #[test]
    fn publish_speaks_https_but_to_a_loopback_registry_and_resolves_no_index() {
        let local = client_config(&parse("127.0.0.1:5000/ada/notes:1").unwrap());
        assert!(matches!(&local.protocol, ClientProtocol::HttpsExcept(l) if l == &["127.0.0.1:5000".to_string()]));
        let remote = client_config(&parse("ghcr.io/ada/notes:1").unwrap());
        assert!(matches!(remote.protocol, ClientProtocol::Https));
        assert!(remote.platform_resolver.is_none(), "an index is refused, not resolved to one of its images");
        assert_eq!(
            (remote.connect_timeout, remote.read_timeout),
            (Some(Duration::from_secs(15)), Some(Duration::from_secs(60)))
        );
        assert!(remote.user_agent.starts_with("autoapp/"));
    }

    /// What a registry answered `publish` (through oci-client) is one
    /// sentence of the right kind each.
    #[test]
    fn each_registry_answer_is_said_as_what_it_means() {
        use oci_client::errors::{OciEnvelope, OciError};
        let target = parse("127.0.0.1:5000/ada/notes:1").unwrap();
        let said = |e: OciDistributionError| {
            let e = registry_error(&target, &e);
            (crate::error::kind_of(&e), e.to_string())
        };
        let envelope = |code: OciErrorCode| OciDistributionError::RegistryError {
            envelope: OciEnvelope {
                errors: vec![OciError { code, message: String::new(), detail: serde_json::Value::Null }],
            },
            url: "u".into(),
        };
        let server = |code: u16| OciDistributionError::ServerError { code, url: "u".into(), message: "m".into() };
        let has_no = (ErrorKind::NotFound, "the registry 127.0.0.1:5000 has no 127.0.0.1:5000/ada/notes:1".to_string());
        for e in [
            OciDistributionError::ImageManifestNotFoundError("x".into()),
            envelope(OciErrorCode::ManifestUnknown),
            envelope(OciErrorCode::BlobUnknown),
            server(404),
        ] {
            assert_eq!(said(e), has_no);
        }
        for e in [
            OciDistributionError::UnauthorizedError { url: "u".into() },
            OciDistributionError::AuthenticationFailure("x".into()),
            envelope(OciErrorCode::Denied),
            server(401),
            server(403),
        ] {
            let (kind, text) = said(e);
            assert_eq!(kind, ErrorKind::Denied);
            assert!(text.contains("refused you access") && text.contains("docker login 127.0.0.1:5000"), "{text}");
        }
        let lying = OciDistributionError::DigestError(oci_client::errors::DigestError::VerificationError {
            expected: "sha256:aa".into(),
            actual: "sha256:bb".into(),
        });
        let (kind, text) = said(lying);
        assert!(kind == ErrorKind::Denied && text.contains("with a digest that does not match"), "{text}");
        // A registry nobody answers at: one sentence saying so.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let refused_connection = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(reqwest::Client::new().get("http://127.0.0.1:1/").send())
            .unwrap_err();
        let (kind, text) = said(OciDistributionError::RequestError(refused_connection));
        assert!(
            kind == ErrorKind::Internal && text.starts_with("cannot reach the registry 127.0.0.1:5000: "),
            "{text}"
        );
        // A request that failed otherwise (here: it could not even be made)
        // is not said to be a registry nobody answers at.
        let unmade = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(reqwest::Client::new().get("http://exa mple/").send())
            .unwrap_err();
        assert!(!unmade.is_connect() && !unmade.is_timeout());
        let (_, text) = said(OciDistributionError::RequestError(unmade));
        assert!(!text.starts_with("cannot reach"), "{text}");
        let (kind, text) = said(OciDistributionError::ImageIndexParsingNoPlatformResolverError);
        assert!(kind == ErrorKind::Denied && text.contains("is an index of several images"), "{text}");
        for e in
            [envelope(OciErrorCode::SizeInvalid), server(500), OciDistributionError::GenericError(Some("g".into()))]
        {
            let (kind, text) = said(e);
            assert!(
                kind == ErrorKind::Internal && text.starts_with("the registry 127.0.0.1:5000 answered: "),
                "{text}"
            );
        }
    }

    #[test]
    fn only_loopback_registries_are_spoken_to_over_plain_http() {
        for yes in ["127.0.0.1:5000", "localhost", "LOCALHOST:80", "[::1]:5000", "127.3.2.1"] {
            assert!(is_loopback(yes), "{yes}");
        }
        for no in ["ghcr.io", "10.0.0.1:5000", "[::2]:5000", "localhost.example.com", "127.0.0.1.nip.io"] {
            assert!(!is_loopback(no), "{no}");
        }
    }

    fn manifest(layers: &[(&str, i64)], config: &str) -> OciImageManifest {
        let layer = |(media, size): &(&str, i64)| oci_client::manifest::OciDescriptor {
            media_type: media.to_string(),
            digest: format!("sha256:{}", "a".repeat(64)),
            size: *size,
            ..Default::default()
        };
        OciImageManifest {
            media_type: Some(WASM_MANIFEST_MEDIA_TYPE.into()),
            config: oci_client::manifest::OciDescriptor { media_type: config.into(), ..Default::default() },
            layers: layers.iter().map(layer).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_manifest_must_be_one_wasm_layer_within_the_limit() {
        let t = parse("127.0.0.1:5000/notes:1").unwrap();
        let c = WASM_MANIFEST_CONFIG_MEDIA_TYPE;
        assert!(check_manifest(&t, &manifest(&[(WASM_LAYER_MEDIA_TYPE, 10)], c), 10).is_ok());
        let cases = [
            (manifest(&[(WASM_LAYER_MEDIA_TYPE, 11)], c), "at most 10 bytes"),
            (manifest(&[(WASM_LAYER_MEDIA_TYPE, 1), (WASM_LAYER_MEDIA_TYPE, 1)], c), "2 layers"),
            (manifest(&[], c), "0 layers"),
            (manifest(&[("application/vnd.oci.image.layer.v1.tar", 1)], c), "its layer is"),
            (manifest(&[(WASM_LAYER_MEDIA_TYPE, 1)], "application/vnd.oci.image.config.v1+json"), "its config is"),
        ];
        for (m, says) in cases {
            let e = check_manifest(&t, &m, 10).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
        let mut other = manifest(&[(WASM_LAYER_MEDIA_TYPE, 1)], c);
        other.media_type = Some("application/vnd.docker.distribution.manifest.v2+json".into());
        assert!(check_manifest(&t, &other, 10).unwrap_err().to_string().contains("its manifest is"));
        let mut md5 = manifest(&[(WASM_LAYER_MEDIA_TYPE, 1)], c);
        md5.layers[0].digest = "md5:abc".into();
        assert!(check_manifest(&t, &md5, 10).unwrap_err().to_string().contains("not a SHA-256"));
        // A path where the hex should be: it would become the blob's address.
        let mut path = manifest(&[(WASM_LAYER_MEDIA_TYPE, 1)], c);
        path.layers[0].digest = format!("sha256:/../../{}", "a".repeat(58));
        assert!(check_manifest(&t, &path, 10).unwrap_err().to_string().contains("not a SHA-256"));
    }
}
