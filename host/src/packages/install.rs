//! `autoapp install FILE|REFERENCE`: a package from elsewhere (a file, or
//! a registry through [`super::registry`]) becomes a candidate
//! release — checked whole first, placed only then, never activated and
//! never granted (those stay the person's, as for any candidate).
//!
//! What is checked, in order, each refused with one sentence and nothing
//! placed: the package's size (`package_max_mib`); its framing and Autoapp's
//! sections ([`super::format::read`], through `elsewhere::wasm`); the
//! signature ([`super::sign::verify`]; none only with `--unsigned`); the WIT
//! version; the manifest, as a build checks it; the migrations it carries
//! being exactly the manifest's; the publisher, against the one pinned at the
//! app's first install (`publisher.json`; another key only with
//! `--publisher <its fingerprint>`) — and an existing app of the id that is
//! pinned to nobody (built from a workspace, restored without a pin, installed
//! unsigned) takes no package at all (`--as <new-id>` places it beside); the
//! component last, as the dearest, as a build checks it but compiled in a
//! confined process within its budget (`build::check_component`,
//! `build::Came::Elsewhere`).

use std::path::Path;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::format;
use super::sign::{self, Publisher};
use crate::error::{ErrorKind, kinded};
use crate::gate::Caller;
use crate::manifest::AppId;
use crate::release::ReleaseInputs;
use crate::root::{AppPaths, Root};
use crate::runtime::Runtime;

/// The publisher pinned for an app, in its folder.
pub const PUBLISHER_FILE: &str = "publisher.json";

/// What an app's first signed install pinned.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pinned {
    pub name: String,
    pub fingerprint: String,
    pub key: String,
    pub pinned_at: String,
}

/// How the package's publisher stands against the app's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Standing {
    /// Nobody signed it (installed with `--unsigned`).
    Unsigned,
    /// The first package installed from this publisher for this app.
    FirstTime,
    /// The publisher pinned at the app's first install.
    Same,
    /// Another key than the pinned one, which the person named.
    Changed { from: String },
}

/// What `install` placed.
#[derive(Debug, Clone, Serialize)]
pub struct Installed {
    pub app: String,
    pub release: String,
    pub version: String,
    /// Whether the install made the app (it had none of that id).
    pub new_app: bool,
    /// Whether the release was new (an identical one may be there already).
    pub new_release: bool,
    /// Where the package came from: a file, or a registry reference with the
    /// manifest's digest.
    pub origin: String,
    pub publisher: Option<Publisher>,
    pub standing: Standing,
}

impl Installed {
    /// How its publisher stands, after "NAME (fingerprint F)": the first
    /// time, the same as the app's, or a new key the person accepted.
    pub fn standing_said(&self) -> String {
        match &self.standing {
            Standing::FirstTime => format!(
                ": the first time you install {} from this publisher; later packages must be signed by the same key",
                self.app
            ),
            Standing::Same => ": the same publisher as the app you have".to_string(),
            Standing::Changed { from } => format!(", which you accepted in place of {from}; it is pinned from now on"),
            Standing::Unsigned => String::new(),
        }
    }
}

/// The person's choices for one install.
#[derive(Debug, Clone, Default)]
pub struct Options<'a> {
    pub as_id: Option<&'a AppId>,
    pub unsigned: bool,
    /// The fingerprint of a new publisher the person accepts.
    pub publisher: Option<&'a str>,
}

/// A refusal of what a package (or its registry) holds.
pub(super) fn refused(why: impl std::fmt::Display) -> anyhow::Error {
    kinded(ErrorKind::Denied, why.to_string())
}

/// The publisher pinned for `app`, if any.
pub fn pinned(app: &AppPaths) -> anyhow::Result<Option<Pinned>> {
    let path = app.dir.join(PUBLISHER_FILE);
    match std::fs::read_to_string(&path) {
        Ok(t) => check_pinned(&t).map(Some).map_err(|e| anyhow::anyhow!("{} is damaged: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Reads a `publisher.json` as text from elsewhere (a backup, a file edited
/// by hand): its fields exactly, a name a signature could carry, a key of
/// 32 bytes whose fingerprint is the one it states, and a time.
pub fn check_pinned(text: &str) -> Result<Pinned, String> {
    let p: Pinned = serde_json::from_str(text).map_err(|e| format!("it is not a pinned publisher ({e})"))?;
    sign::check_name_pinned(&p.name).map_err(|e| format!("its publisher's name is refused: {e}"))?;
    let key: [u8; 32] =
        hex::decode(&p.key).ok().and_then(|k| k.try_into().ok()).ok_or("its key is not 32 bytes in hex")?;
    if sign::fingerprint(&key) != p.fingerprint {
        return Err("its fingerprint is not its key's".into());
    }
    if p.pinned_at.len() > 40 || humantime::parse_rfc3339_weak(&p.pinned_at).is_err() {
        return Err("its pinned_at is not a time".into());
    }
    Ok(p)
}

/// Whether two keys written in hex are the same key: compared as bytes (a
/// pin written before keys had one text may be in uppercase).
fn same_key(a: &str, b: &str) -> bool {
    matches!((hex::decode(a), hex::decode(b)), (Ok(a), Ok(b)) if a.len() == 32 && a == b)
}

/// Refuses a package of the app `of` for the existing app at `paths` when
/// that app's releases are of another app: an update never turns one app
/// into another (with `--as`, or over an app built under that id).
fn same_app(paths: &AppPaths, of: &AppId) -> anyhow::Result<()> {
    let releases = crate::release::list(paths)?;
    let Some(newest) = releases.last() else { return Ok(()) };
    if newest.app == of.as_str() {
        return Ok(());
    }
    Err(refused(format!(
        "the package is the app {of}, and {} here is another app ({}); install it under a new id with --as <id>",
        paths.id,
        crate::elsewhere::named(&newest.app)
    )))
}

/// Reads `file` whole, refusing one larger than `max` bytes before a byte
/// of it is read (and one that grows meanwhile).
pub fn read_file(file: &Path, max: u64) -> anyhow::Result<Vec<u8>> {
    use std::io::Read as _;
    let f = std::fs::File::open(file).with_context(|| format!("cannot read {}", file.display()))?;
    let len = f.metadata()?.len();
    if len > max {
        return Err(refused(format!(
            "{} is {len} bytes; a package may be at most {max} bytes (package_max_mib)",
            crate::elsewhere::text::terminal(&file.display().to_string())
        )));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    f.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(refused(format!("the package grew past {max} bytes while it was read")));
    }
    Ok(bytes)
}

/// A package that passed every check but its component's: what `install`
/// places once the component passes too.
struct Checked<'a> {
    package: format::Package<'a>,
    publisher: Option<Publisher>,
    manifest: crate::manifest::Manifest,
    id: AppId,
    paths: AppPaths,
    existing: bool,
    standing: Standing,
}

/// Every check of a package that needs no compiler, in order: its sections,
/// its signature (or the person's `--unsigned`), its WIT version, its
/// manifest as a build checks it, its migrations against the manifest's list
/// and run as activation would, the app it would become a candidate of, the
/// publisher it stands as.
fn checked<'a>(
    root: &Root,
    runtime: &Runtime,
    bytes: &'a [u8],
    options: &Options<'_>,
    progress: &dyn Fn(&str),
) -> anyhow::Result<Checked<'a>> {
    let package = format::read(bytes).map_err(|e| refused(format!("this is not a package Autoapp installs: {e}")))?;
    progress("read Autoapp's sections: the manifest, the migrations, the WIT version");
    let publisher = sign::verify(&package).map_err(|e| refused(format!("the package is refused: {e}")))?;
    match &publisher {
        Some(p) => progress(&format!("the signature verifies: {}", sign::who(&p.fingerprint, &p.name))),
        None if options.unsigned => progress("the package is not signed: anyone could have made it"),
        None => {
            return Err(refused(
                "the package is not signed, so anyone could have made it; if you trust where it came from, install it with --unsigned",
            ));
        }
    }
    let ours = crate::bindings::WIT_PACKAGE;
    if package.wit != ours {
        return Err(refused(format!(
            "the package was built against {} and this Autoapp speaks {ours}; ask its publisher for a package built against {ours}",
            crate::elsewhere::named(&package.wit)
        )));
    }
    let manifest = crate::build::check_manifest(runtime, &package.manifest_text, "the package's autoapp.toml")
        .map_err(|e| match e {
            crate::build::BuildError::Manifest(m) => refused(m.said_to_installer()),
            other => refused(other),
        })?;
    // `--as` places it under another id: beside an app of the same id, or
    // as an update of an app installed under that id before.
    let id = options.as_id.cloned().unwrap_or_else(|| manifest.id.clone());
    let names: Vec<&str> = package.migrations.iter().map(|m| m.name.as_str()).collect();
    if names != manifest.migrations.iter().map(String::as_str).collect::<Vec<_>>() {
        return Err(refused(
            "the migrations the package carries are not the ones its manifest lists ([data] migrations), in that order",
        ));
    }
    // The limits and rules activation runs them under, now (issue 51, rule
    // 10): each at most MAX_MIGRATION_SQL, run on an empty database under a
    // write call's authorizer and a budget. A migration activation would
    // refuse is refused before anything is placed.
    crate::caps::store::schema_made_by(&package.migrations)
        .map_err(|e| refused(format!("the package's migrations are refused: {e:#}")))?;
    let paths = root.app(&id);
    let existing = paths.exists();
    if existing {
        same_app(&paths, &manifest.id)?;
    }
    let pin = if existing { pinned(&paths)? } else { None };
    let standing = standing(&id, existing, publisher.as_ref(), pin.as_ref(), options.publisher)?;
    if let Some(fp) = options.publisher
        && !matches!(standing, Standing::Changed { .. })
        && publisher.as_ref().is_none_or(|p| p.fingerprint != fp)
    {
        return Err(refused(format!(
            "--publisher names {} but the package is {}; give the fingerprint the package is signed with, or leave --publisher out",
            crate::elsewhere::named(fp),
            publisher.as_ref().map_or("not signed".to_string(), |p| format!("signed by fingerprint {}", p.fingerprint))
        )));
    }
    Ok(Checked { package, publisher, manifest, id, paths, existing, standing })
}

/// Installs the package `bytes` (read from `origin`) as a candidate release
/// of its app (made when it has none). Nothing is placed unless every check
/// passed.
pub fn install(
    root: &Root,
    runtime: &Runtime,
    caller: &Caller,
    bytes: &[u8],
    origin: &str,
    options: &Options<'_>,
    progress: &dyn Fn(&str),
) -> anyhow::Result<Installed> {
    let check = |id: &AppId, component: &[u8]| {
        crate::build::check_component(root, id, runtime, component, crate::build::Came::Elsewhere, progress)
            .map_err(|e| refused(format!("the package's component is refused: {e}")))
    };
    install_with(root, runtime, caller, bytes, origin, options, progress, &check)
}

/// What the check of a package's component is: `build::check_component`,
/// or a test's stand-in.
type ComponentCheck<'a> = dyn Fn(&AppId, &[u8]) -> anyhow::Result<()> + 'a;

/// [`install`], with the component's check given.
#[allow(clippy::too_many_arguments)]
fn install_with(
    root: &Root,
    runtime: &Runtime,
    caller: &Caller,
    bytes: &[u8],
    origin: &str,
    options: &Options<'_>,
    progress: &dyn Fn(&str),
    check_component: &ComponentCheck<'_>,
) -> anyhow::Result<Installed> {
    let checked = checked(root, runtime, bytes, options, progress)?;
    let id = checked.id.clone();
    // What a refusal from here on takes away again (issue 73, rule 1): the
    // folders the attempt makes (`apps/`, the cache's) and the component's
    // compiled code, unless the cache held it before.
    let cache = root.compiled_of(&id);
    let made = crate::root::Made::before(&[&cache, &checked.paths.dir]);
    let component = checked.package.component;
    let cached = runtime.is_compiled(&cache, component);
    // The component last: compiling it is the dearest check.
    let done = check_component(&id, component).and_then(|()| placed(root, caller, checked, origin, options));
    if done.is_err() {
        // A new app that did not come to be leaves no compiled code, and an
        // app that was there keeps only the code it had.
        crate::lifecycle::forget_compiled(root, &id);
        if !cached {
            runtime.forget_compiled(&cache, component);
        }
        made.undo();
    }
    done
}

/// Places a package that passed every check as a candidate (its app's
/// folder made when it is new; gone again when placing fails), and records
/// the install.
fn placed(
    root: &Root,
    caller: &Caller,
    checked: Checked<'_>,
    origin: &str,
    options: &Options<'_>,
) -> anyhow::Result<Installed> {
    let Checked { package, publisher, manifest, id, paths, existing, standing } = checked;
    if !existing {
        std::fs::create_dir_all(root.apps_dir())?;
        match std::fs::create_dir(&paths.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(kinded(
                    ErrorKind::Conflict,
                    format!("the app {id} appeared while the package was checked; install it again"),
                ));
            }
            Err(e) => return Err(e).with_context(|| format!("cannot create {}", paths.dir.display())),
        }
    }
    let placed = place(&paths, &package, &manifest, publisher.as_ref(), &standing);
    let done = placed.map(|(info, new_release)| Installed {
        app: id.to_string(),
        release: info.id,
        version: info.version,
        new_app: !existing,
        new_release,
        origin: origin.to_string(),
        publisher: publisher.clone(),
        standing: standing.clone(),
    });
    if done.is_err() && !existing {
        let _ = std::fs::remove_dir_all(&paths.dir);
        return done;
    }
    let arguments = serde_json::json!({
        "publisher": publisher.as_ref().map(|p| &p.fingerprint),
        "unsigned": options.unsigned,
        "from": origin,
    });
    crate::gate::record::recorded(&paths, caller, "install", arguments, done, |i| {
        let from = match &i.publisher {
            Some(p) => format!("signed by {}", sign::who(&p.fingerprint, &crate::elsewhere::text::one_line(&p.name))),
            None => "not signed".to_string(),
        };
        (
            i.release.clone(),
            format!("installed {} {} from {}, {from}", i.app, i.version, crate::elsewhere::text::one_line(&i.origin)),
        )
    })
}

/// How the package's `publisher` stands against the app `id` (`existing`,
/// pinned to `pin`), the person having accepted the key `accepted`
/// (`--publisher`); or the refusal.
///
/// Issue 51, rule 3: a package is a candidate only of an app pinned to its
/// publisher. An app of that id built here, restored without a pin, or
/// installed unsigned is the person's own: a stranger's package of the same
/// id never becomes one of its releases (it would inherit its grants, and its
/// migrations would run on its data). Keys are compared as bytes (rule 7).
fn standing(
    id: &AppId,
    existing: bool,
    publisher: Option<&Publisher>,
    pin: Option<&Pinned>,
    accepted: Option<&str>,
) -> anyhow::Result<Standing> {
    match (publisher, pin) {
        (None, Some(k)) => Err(refused(format!(
            "{id} was installed from the publisher with {}, and this package is not signed, so anyone could have made it; ask the publisher for a signed package",
            sign::who(&k.fingerprint, &k.name)
        ))),
        (None, None) if existing => Err(refused(format!(
            "the package is not signed, so anyone could have made it, and you already have an app {id}: an unsigned package never becomes a release of an app you have; install it beside yours under a new id with --as <new-id>"
        ))),
        (_, None) if existing => Err(refused(format!(
            "you already have an app {id} that was not installed from this publisher's packages (built from a workspace, restored without a publisher, or installed unsigned), so this package cannot become one of its releases; install it beside yours under a new id with --as <new-id>"
        ))),
        (None, None) => Ok(Standing::Unsigned),
        (Some(_), None) => Ok(Standing::FirstTime),
        (Some(p), Some(k)) if same_key(&p.key, &k.key) => Ok(Standing::Same),
        (Some(p), Some(k)) if accepted == Some(p.fingerprint.as_str()) => {
            Ok(Standing::Changed { from: k.fingerprint.clone() })
        }
        (Some(p), Some(k)) => Err(refused(format!(
            "{id} was installed from the publisher with {}, and this package is signed by another key: {}; if the publisher told you their key changed, install it with --publisher {}",
            sign::who(&k.fingerprint, &k.name),
            sign::who(&p.fingerprint, &p.name),
            p.fingerprint
        ))),
    }
}

fn place(
    paths: &AppPaths,
    package: &format::Package<'_>,
    manifest: &crate::manifest::Manifest,
    publisher: Option<&Publisher>,
    standing: &Standing,
) -> anyhow::Result<(crate::release::ReleaseInfo, bool)> {
    let written = crate::release::write(
        paths,
        &ReleaseInputs {
            component: package.component,
            manifest_text: &package.manifest_text,
            manifest,
            migrations: &package.migrations,
            source: "package",
        },
    )?;
    if let Some(p) = publisher
        && matches!(standing, Standing::FirstTime | Standing::Changed { .. })
    {
        let pin = Pinned {
            name: p.name.clone(),
            fingerprint: p.fingerprint.clone(),
            key: p.key.clone(),
            pinned_at: crate::release::now_rfc3339(),
        };
        crate::root::write_atomic(&paths.dir.join(PUBLISHER_FILE), serde_json::to_string_pretty(&pin)?.as_bytes())?;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(name: &str, key: &str, fingerprint: &str, at: &str) -> String {
        serde_json::json!({ "name": name, "fingerprint": fingerprint, "key": key, "pinned_at": at }).to_string()
    }

    /// Rules 3 and 7: who may become a candidate of what.
    #[test]
    fn a_package_stands_against_the_app_of_its_id_by_its_pin_alone() {
        let id = AppId::parse("notes").unwrap();
        let key = [7u8; 32];
        let (fp, other_fp) = (sign::fingerprint(&key), sign::fingerprint(&[8u8; 32]));
        let ada = Publisher { name: "Ada".into(), fingerprint: fp.clone(), key: hex::encode(key) };
        let eve = Publisher { name: "Eve".into(), fingerprint: other_fp.clone(), key: hex::encode([8u8; 32]) };
        let pin =
            |k: &str| Pinned { name: "Ada".into(), fingerprint: fp.clone(), key: k.into(), pinned_at: "t".into() };
        let said = |r: anyhow::Result<Standing>| r.map_err(|e| e.to_string());
        // A new app: whoever signed it, or nobody.
        assert_eq!(said(standing(&id, false, Some(&ada), None, None)), Ok(Standing::FirstTime));
        assert_eq!(said(standing(&id, false, None, None, None)), Ok(Standing::Unsigned));
        // The person's own app (no pin): nobody's package, signed or not;
        // an unsigned one is said to be unsigned (issue 73, point 3).
        let e = said(standing(&id, true, Some(&ada), None, None)).unwrap_err();
        assert!(e.contains("--as <new-id>") && e.contains("not installed from this publisher"), "{e}");
        let e = said(standing(&id, true, None, None, None)).unwrap_err();
        assert!(e.contains("--as <new-id>") && e.contains("the package is not signed"), "{e}");
        // Pinned: the same key (as bytes, whatever case the pin was written in).
        let lower = pin(&hex::encode(key));
        let upper = pin(&hex::encode(key).to_uppercase());
        assert_eq!(said(standing(&id, true, Some(&ada), Some(&lower), None)), Ok(Standing::Same));
        assert_eq!(said(standing(&id, true, Some(&ada), Some(&upper), None)), Ok(Standing::Same));
        assert!(said(standing(&id, true, None, Some(&lower), None)).unwrap_err().contains("not signed"));
        let e = said(standing(&id, true, Some(&eve), Some(&lower), None)).unwrap_err();
        assert!(e.contains("another key") && e.contains(&other_fp) && e.contains(&fp), "{e}");
        assert_eq!(
            said(standing(&id, true, Some(&eve), Some(&lower), Some(&other_fp))),
            Ok(Standing::Changed { from: fp.clone() })
        );
        assert!(
            said(standing(&id, true, Some(&eve), Some(&lower), Some(&fp))).is_err(),
            "the key accepted must be the package's"
        );
        assert!(!same_key("zz", "zz") && !same_key("00", "00"), "keys are 32 bytes of hex");
    }

    /// The pin is read from the app's folder: none when there is no file, the
    /// pin when it holds together, a refusal naming the file when damaged.
    #[test]
    fn an_app_s_pin_is_read_from_its_folder_or_said_damaged() {
        let dir = tempfile::tempdir().unwrap();
        let paths = AppPaths { id: AppId::parse("notes").unwrap(), dir: dir.path().to_path_buf() };
        assert!(pinned(&paths).unwrap().is_none());
        let key = [7u8; 32];
        let text = text("Ada", &hex::encode(key), &sign::fingerprint(&key), "2026-12-01T10:00:00Z");
        std::fs::write(dir.path().join(PUBLISHER_FILE), &text).unwrap();
        assert_eq!(pinned(&paths).unwrap().unwrap().name, "Ada");
        std::fs::write(dir.path().join(PUBLISHER_FILE), "{").unwrap();
        assert!(pinned(&paths).unwrap_err().to_string().contains("is damaged"));
        std::fs::remove_file(dir.path().join(PUBLISHER_FILE)).unwrap();
        std::fs::create_dir(dir.path().join(PUBLISHER_FILE)).unwrap();
        assert!(pinned(&paths).unwrap_err().to_string().contains("cannot read"), "a folder is no pin");
    }

    /// What `install` says after the publisher's name, for each standing.
    #[test]
    fn each_standing_is_said_in_its_own_words() {
        let i = |standing| Installed {
            app: "notes".into(),
            release: "r".into(),
            version: "0.1.0".into(),
            new_app: false,
            new_release: true,
            origin: "f".into(),
            publisher: None,
            standing,
        };
        assert!(
            i(Standing::FirstTime).standing_said().contains("the first time you install notes from this publisher")
        );
        assert_eq!(i(Standing::Same).standing_said(), ": the same publisher as the app you have");
        assert!(i(Standing::Changed { from: "ab12".into() }).standing_said().contains("in place of ab12"));
        assert_eq!(i(Standing::Unsigned).standing_said(), "");
    }

    #[test]
    fn a_pinned_publisher_from_elsewhere_holds_together_or_is_refused() {
        let key = [7u8; 32];
        let (hex_key, fp) = (hex::encode(key), sign::fingerprint(&key));
        let at = "2026-12-01T10:00:00Z";
        assert_eq!(check_pinned(&text("Ada", &hex_key, &fp, at)).unwrap().fingerprint, fp);
        let other = sign::fingerprint(&[8u8; 32]);
        assert_eq!(check_pinned(&text("Ada", &hex_key, &other, at)).unwrap_err(), "its fingerprint is not its key's");
        assert!(check_pinned(&text("Ada", "00", &fp, at)).unwrap_err().contains("32 bytes"));
        assert!(check_pinned(&text("Ada\u{1b}[2J", &hex_key, &fp, at)).unwrap_err().contains("name is refused"));
        assert!(check_pinned(&text("Ada", &hex_key, &fp, "yesterday")).unwrap_err().contains("not a time"));
        let long = format!("{at}{}", " ".repeat(40));
        assert!(check_pinned(&text("Ada", &hex_key, &fp, &long)).is_err());
        let extra = text("Ada", &hex_key, &fp, at).replace('}', r#","trusted":true}"#);
        assert!(check_pinned(&extra).unwrap_err().contains("not a pinned publisher"));
    }

    const MANIFEST: &str = "[app]\nid = \"notes\"\nname = \"Notes\"\nversion = \"0.1.0\"\n\n[[route]]\nname = \"n\"\neffect = \"read\"\nsummary = \"s\"\n";

    fn package(manifest: &str, wit: &str, key: Option<&sign::Key>) -> Vec<u8> {
        let component = wat::parse_str("(component)").unwrap();
        let bytes =
            format::pack(&format::Contents { component: &component, manifest_text: manifest, migrations: &[], wit })
                .unwrap();
        match key {
            Some(k) => sign::sign(bytes, k),
            None => bytes,
        }
    }

    /// Every check before the component's, each with its sentence, on a root
    /// where nothing is placed (issue 51's mutation criterion: these were
    /// seen only by the end-to-end tests).
    #[test]
    fn every_check_before_the_component_refuses_with_its_own_sentence() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::open(dir.path()).unwrap();
        let runtime = Runtime::new(&crate::config::Config::default()).unwrap();
        let keys = tempfile::tempdir().unwrap();
        let ada = sign::new_key(keys.path(), "Ada").unwrap();
        let ours = crate::bindings::WIT_PACKAGE;
        let opts = |unsigned, publisher| Options { as_id: None, unsigned, publisher };
        let check = |bytes: &[u8], o: &Options<'_>| checked(&root, &runtime, bytes, o, &|_| {}).map(|c| c.standing);
        let said = |r: anyhow::Result<Standing>| r.map_err(|e| format!("{e:#}"));

        let unsigned = package(MANIFEST, ours, None);
        assert!(said(check(&unsigned, &opts(false, None))).unwrap_err().contains("install it with --unsigned"));
        assert_eq!(said(check(&unsigned, &opts(true, None))), Ok(Standing::Unsigned));
        let signed = package(MANIFEST, ours, Some(&ada));
        assert_eq!(said(check(&signed, &opts(false, None))), Ok(Standing::FirstTime));

        // A manifest a build would refuse: its problems, said to someone who
        // installs, not "fix each and build again" (issue 73, point 3).
        let broken = MANIFEST.replace("effect = \"read\"\nsummary = \"s\"\n", "effect = \"sometimes\"\n");
        let e = said(check(&package(&broken, ours, Some(&ada)), &opts(false, None))).unwrap_err();
        assert!(e.contains("has 2 problems; the package cannot be installed until its publisher fixes them"), "{e}");
        assert!(!e.contains("build again"), "{e}");

        let other_wit = package(MANIFEST, "autoapp:app@9.9.9", Some(&ada));
        assert!(said(check(&other_wit, &opts(false, None))).unwrap_err().contains("was built against"));
        let listed = format!("{MANIFEST}\n[data]\nmigrations = [\"migrations/0001.sql\"]\n");
        let missing = package(&listed, ours, Some(&ada));
        assert!(said(check(&missing, &opts(false, None))).unwrap_err().contains("are not the ones its manifest lists"));
        let fp = ada.fingerprint();
        let wrong = "0".repeat(fp.len());
        assert!(said(check(&signed, &opts(false, Some(&wrong)))).unwrap_err().contains("--publisher names"));
        assert_eq!(said(check(&signed, &opts(false, Some(&fp)))), Ok(Standing::FirstTime));
        assert!(
            said(check(b"not a package", &opts(true, None))).unwrap_err().contains("not a package Autoapp installs")
        );

        // An app of that id here that is another app: refused before its pin.
        let paths = root.app(&AppId::parse("notes").unwrap());
        let release = paths.releases().join("a".repeat(64));
        std::fs::create_dir_all(&release).unwrap();
        let info = crate::release::ReleaseInfo {
            id: "a".repeat(64),
            app: "news".into(),
            version: "1.0.0".into(),
            created_at: "2026-12-01T10:00:00Z".into(),
            component_sha256: "0".repeat(64),
            component_bytes: 0,
            source: "cargo".into(),
        };
        std::fs::write(release.join(crate::release::RELEASE_FILE), serde_json::to_string(&info).unwrap()).unwrap();
        assert!(said(check(&signed, &opts(false, None))).unwrap_err().contains("is another app"));
        // The same app, built by the person: not a stranger's to update.
        let info = crate::release::ReleaseInfo { app: "notes".into(), ..info };
        std::fs::write(release.join(crate::release::RELEASE_FILE), serde_json::to_string(&info).unwrap()).unwrap();
        assert!(said(check(&signed, &opts(false, None))).unwrap_err().contains("--as <new-id>"));
    }

    /// What follows the checks: a new app's folder made, the candidate and
    /// the pin written, the install recorded; an app that appeared meanwhile
    /// refused.
    #[test]
    fn a_checked_package_is_placed_whole_or_refused_when_its_app_appeared() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::open(dir.path()).unwrap();
        let runtime = Runtime::new(&crate::config::Config::default()).unwrap();
        let keys = tempfile::tempdir().unwrap();
        let ada = sign::new_key(keys.path(), "Ada").unwrap();
        let bytes = package(MANIFEST, crate::bindings::WIT_PACKAGE, Some(&ada));
        let opts = Options { as_id: None, unsigned: false, publisher: None };
        let caller = Caller::command_line();
        let check = || checked(&root, &runtime, &bytes, &opts, &|_| {}).unwrap();

        // An app of that id appeared while the package was checked.
        let first = check();
        std::fs::create_dir_all(&first.paths.dir).unwrap();
        let e = placed(&root, &caller, first, "f", &opts).unwrap_err();
        assert_eq!(crate::error::kind_of(&e), ErrorKind::Conflict, "{e:#}");
        assert!(format!("{e:#}").contains("appeared while the package was checked"));
        std::fs::remove_dir(root.app(&AppId::parse("notes").unwrap()).dir).unwrap();

        let paths = root.app(&AppId::parse("notes").unwrap());

        // Placed: the candidate, the pin, the record's row.
        let i = placed(&root, &caller, check(), "notes.wasm", &opts).unwrap();
        assert!(i.new_app && i.new_release && i.standing == Standing::FirstTime);
        assert_eq!(crate::release::list(&paths).unwrap().len(), 1);
        assert_eq!(pinned(&paths).unwrap().unwrap().fingerprint, ada.fingerprint());
        let rows = crate::gate::record::read(&paths.data(), 5).unwrap();
        assert!(rows.iter().any(|r| r.route == "install"), "{rows:?}");

        // A placement that fails over an app that was there before leaves
        // that app whole (its releases folder made unusable after the checks).
        let again = check();
        assert!(again.existing);
        std::fs::rename(paths.releases(), dir.path().join("releases-aside")).unwrap();
        std::fs::write(paths.releases(), "not a folder").unwrap();
        assert!(placed(&root, &caller, again, "notes.wasm", &opts).is_err());
        assert!(paths.dir.is_dir(), "the app that was there before is kept");
        assert_eq!(pinned(&paths).unwrap().unwrap().fingerprint, ada.fingerprint());
    }

    /// Issue 73, rule 1: an install refused at its component's check (or
    /// later) takes away what the attempt made — the cache's folders, the
    /// component's compiled code unless the cache held it before — and
    /// leaves an app that was there as it was.
    #[test]
    fn an_install_refused_late_leaves_the_root_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::open(dir.path()).unwrap();
        let runtime = Runtime::new(&crate::config::Config::default()).unwrap();
        let keys = tempfile::tempdir().unwrap();
        let ada = sign::new_key(keys.path(), "Ada").unwrap();
        let bytes = package(MANIFEST, crate::bindings::WIT_PACKAGE, Some(&ada));
        let opts = Options { as_id: None, unsigned: false, publisher: None };
        let caller = Caller::command_line();
        let id = AppId::parse("notes").unwrap();
        let compiled = |component: &[u8]| runtime.compiled_path(&root.compiled_of(&id), component);
        // A check that compiles (leaves code in the cache), then refuses.
        let compiles_then_refuses = |_: &AppId, component: &[u8]| {
            let path = compiled(component);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, b"code").unwrap();
            Err(refused("refused after compiling"))
        };
        let tree = || {
            let mut all = walkdir(dir.path());
            all.sort();
            all
        };
        let install = |check: &ComponentCheck<'_>| {
            install_with(&root, &runtime, &caller, &bytes, "f", &opts, &|_| {}, check).map_err(|e| e.to_string())
        };
        // On an empty root: nothing left, not even the cache's folders.
        let before = tree();
        assert_eq!(install(&compiles_then_refuses).unwrap_err(), "refused after compiling");
        assert_eq!(tree(), before);
        // Over an app that was there (pinned to Ada): its files as they were,
        // the refused component's code gone.
        let checked = checked(&root, &runtime, &bytes, &opts, &|_| {}).unwrap();
        let component = checked.package.component.to_vec();
        placed(&root, &caller, checked, "f", &opts).unwrap();
        std::fs::create_dir_all(root.compiled_of(&id)).unwrap();
        let before = tree();
        assert!(install(&compiles_then_refuses).is_err());
        assert_eq!(tree(), before);
        assert!(!compiled(&component).exists());
        // Code the cache held before the attempt is kept.
        std::fs::write(compiled(&component), b"code").unwrap();
        let before = tree();
        assert!(install(&compiles_then_refuses).is_err());
        assert_eq!(tree(), before);
        assert!(compiled(&component).exists());
    }

    /// Every folder and file under `dir`, by its path inside it.
    fn walkdir(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let name = e.path().strip_prefix(dir).unwrap().display().to_string();
                if e.file_type().unwrap().is_dir() {
                    out.push(format!("{name}/"));
                    stack.push(e.path());
                } else {
                    out.push(name);
                }
            }
        }
        out
    }

    #[test]
    fn a_package_file_is_read_whole_within_its_bound_or_refused_before() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("p.wasm");
        std::fs::write(&file, [7u8; 100]).unwrap();
        assert_eq!(read_file(&file, 100).unwrap(), vec![7u8; 100]);
        let over = format!("{:#}", read_file(&file, 99).unwrap_err());
        assert!(over.contains("is 100 bytes; a package may be at most 99 bytes"), "{over}");
        assert!(read_file(&dir.path().join("none"), 100).is_err());
        // A file that holds more than its size says (one that grows while
        // it is read does the same): refused, not cut short.
        let grew = format!("{:#}", read_file(Path::new("/proc/self/status"), 10).unwrap_err());
        assert!(grew.contains("grew past 10 bytes"), "{grew}");
    }
}
