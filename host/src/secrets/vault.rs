//! Where the person's keys are kept: the operating system's keyring when
//! there is one (the `keyring` crate: Secret Service on Linux, Keychain on
//! macOS, Credential Manager on Windows), else a file of mode 0600 in a 0700
//! folder of the person's configuration. Never under the root, so never in a
//! backup, a package, a preview's copy or a release.
//!
//! ```text
//! $XDG_CONFIG_HOME/autoapp/secrets/          0700
//!   <root key>/                              0700   one per Autoapp root (SHA-256 of its real path)
//!     root                                   the root's path, for a person who looks
//!     <app>.json                             0600   name → binding, when it was set, where its value is
//!     <app>.<name>.value                     0600   the value, when it is kept in a file
//! ```
//!
//! A keyring entry is service `autoapp`, user `<root key>/<app>/<name>`.
//! Every keyring call runs on a thread of its own and is given up after
//! [`KEYRING_WAIT`] (a locked keyring may never answer); while
//! [`KEYRING_STUCK`] of them have not answered, another is refused at once,
//! so a keyring that never answers leaves at most that many threads behind.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::Binding;
use super::Value;
use crate::manifest::AppId;

/// How long a keyring call may take before it is given up.
pub const KEYRING_WAIT: Duration = Duration::from_secs(10);

/// At most this many keyring calls not answered yet (their threads wait
/// for the keyring) before another is refused at once.
pub const KEYRING_STUCK: usize = 4;

/// The keyring calls of this process not answered yet.
static KEYRING_WAITING: AtomicUsize = AtomicUsize::new(0);

/// The most a value may be (an API key is far shorter).
pub const VALUE_MAX: usize = 4096;

/// The least a value may be: a shorter one could not be told apart from
/// ordinary text when it is taken out of what comes back.
pub const VALUE_MIN: usize = 8;

/// Where a value is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kept {
    Keyring,
    File,
}

/// One secret the person set: for which binding, when, and where its value
/// is. Never the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Set {
    #[serde(flatten)]
    pub binding: Binding,
    /// When it was set (RFC 3339).
    pub set_at: String,
    pub kept: Kept,
    /// Random, new at every set: a value read before is known to be this
    /// one only when its stamp is (two sets within a second differ).
    pub stamp: String,
}

/// The secrets of one root, in the person's configuration folder.
#[derive(Debug, Clone)]
pub struct Vault {
    dir: PathBuf,
    key: String,
    root: PathBuf,
    choice: crate::config::SecretsKeptIn,
    /// Values read before, by (app, name), with the stamp they were read
    /// for: a keyring is asked once per value set, not once per call.
    cache: std::sync::Arc<std::sync::Mutex<Read>>,
}

/// Values read before: (app, name) → (the stamp they were read for, value).
type Read = BTreeMap<(String, String), (String, Value)>;

impl Vault {
    /// The vault of the root at `root` (its real path names it).
    pub fn of(root: &Path, choice: crate::config::SecretsKeptIn) -> anyhow::Result<Vault> {
        let real = std::fs::canonicalize(root).with_context(|| format!("cannot read {}", root.display()))?;
        Ok(Vault::at(&crate::config::person_dir()?, &real, choice))
    }

    /// The vault of the root whose real path is `real`, in the configuration
    /// folder `config`.
    pub(super) fn at(config: &Path, real: &Path, choice: crate::config::SecretsKeptIn) -> Vault {
        let key = hex::encode(&<sha2::Sha256 as sha2::Digest>::digest(real.as_os_str().as_encoded_bytes())[..16]);
        let dir = config.join("secrets").join(&key);
        Vault { dir, key, root: real.to_path_buf(), choice, cache: Default::default() }
    }

    fn index(&self, app: &AppId) -> PathBuf {
        self.dir.join(format!("{app}.json"))
    }

    fn value_file(&self, app: &AppId, name: &str) -> PathBuf {
        self.dir.join(format!("{app}.{name}.value"))
    }

    fn entry_user(&self, app: &AppId, name: &str) -> String {
        format!("{}/{app}/{name}", self.key)
    }

    /// One change at a time (two `secret set` at once never lose one).
    fn lock(&self) -> anyhow::Result<std::fs::File> {
        let file = self.dir.join(".lock");
        use std::os::unix::fs::OpenOptionsExt as _;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&file)
            .with_context(|| format!("cannot open {}", file.display()))?;
        f.lock().with_context(|| format!("cannot lock {}", file.display()))?;
        Ok(f)
    }

    /// What is set for `app`: name → binding, time, where. Read fresh each
    /// time (another process may have set or removed one).
    pub fn list(&self, app: &AppId) -> anyhow::Result<BTreeMap<String, Set>> {
        let file = self.index(app);
        let text = match read_private(&file)? {
            None => return Ok(BTreeMap::new()),
            Some(t) => t,
        };
        let text = String::from_utf8(text).map_err(|_| anyhow::anyhow!("{} is damaged", file.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{} is damaged", file.display()))
    }

    /// Keeps `value` for `app`'s secret `name`, bound to `binding`, and says
    /// where it went. A value set before is replaced.
    pub fn set(&self, app: &AppId, name: &str, binding: &Binding, value: &Value) -> anyhow::Result<Set> {
        self.set_with(app, name, binding, value, &|app, name| self.keyring_remove(app, name))
    }

    /// [`Vault::set`], with the keyring's removal of a value kept there
    /// before given (a test gives one that fails).
    fn set_with(
        &self,
        app: &AppId,
        name: &str,
        binding: &Binding,
        value: &Value,
        keyring_remove: &dyn Fn(&AppId, &str) -> anyhow::Result<()>,
    ) -> anyhow::Result<Set> {
        check_value(value.expose())?;
        make_private_dir(&self.dir)?;
        let _lock = self.lock()?;
        if !self.dir.join("root").exists() {
            write_private(&self.dir.join("root"), self.root.as_os_str().as_encoded_bytes())?;
        }
        let kept = match self.choice {
            crate::config::SecretsKeptIn::File => Kept::File,
            crate::config::SecretsKeptIn::Keyring => {
                self.keyring_set(app, name, value)?;
                Kept::Keyring
            }
            crate::config::SecretsKeptIn::Auto => match self.keyring_set(app, name, value) {
                Ok(()) => Kept::Keyring,
                Err(e) => {
                    tracing::info!("no keyring answered ({e:#}): the key is kept in a file");
                    Kept::File
                }
            },
        };
        if kept == Kept::File {
            write_private(&self.value_file(app, name), value.expose().as_bytes())?;
        }
        let mut all = self.list(app)?;
        // Moving a value out of the keyring is one step (issue 72, rule 6):
        // the old value goes first; when the keyring does not let it go,
        // nothing changes and the old one stays listed where it is.
        if all.get(name).is_some_and(|b| b.kept == Kept::Keyring)
            && kept == Kept::File
            && let Err(e) = keyring_remove(app, name)
        {
            let _ = remove_file(&self.value_file(app, name));
            return Err(e.context(format!(
                "the value of {name} set before is kept in the keyring, which did not let it go, so nothing changed and it stays listed there; unlock the keyring and set it again"
            )));
        }
        let set = Set {
            binding: binding.clone(),
            set_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            kept,
            stamp: crate::secret::random_hex()[..16].to_string(),
        };
        let before = all.insert(name.to_string(), set.clone());
        write_private(&self.index(app), serde_json::to_string_pretty(&all)?.as_bytes())?;
        // A value kept in a file before is not left behind (one kept in the
        // keyring went above).
        if before.is_some_and(|b| b.kept == Kept::File) && kept == Kept::Keyring {
            remove_file(&self.value_file(app, name))?;
        }
        Ok(set)
    }

    /// Removes `app`'s secret `name`: false when none was set.
    pub fn remove(&self, app: &AppId, name: &str) -> anyhow::Result<bool> {
        self.remove_with(app, name, &|app, name| self.keyring_remove(app, name))
    }

    /// [`Vault::remove`], with the keyring's removal given (a test gives one
    /// that fails). The value goes first, then its line in the index (issue
    /// 72, rule 6): a value the keyring did not let go stays listed, so that
    /// it can be found and removed again, never forgotten where it is.
    fn remove_with(
        &self,
        app: &AppId,
        name: &str,
        keyring_remove: &dyn Fn(&AppId, &str) -> anyhow::Result<()>,
    ) -> anyhow::Result<bool> {
        if !self.dir.exists() {
            return Ok(false);
        }
        let _lock = self.lock()?;
        let mut all = self.list(app)?;
        let Some(was) = all.remove(name) else { return Ok(false) };
        match was.kept {
            Kept::File => remove_file(&self.value_file(app, name))?,
            Kept::Keyring => keyring_remove(app, name).map_err(|e| {
                e.context(format!(
                    "the value of {name} is kept in the keyring, which did not let it go, so it stays listed; unlock the keyring and remove it again"
                ))
            })?,
        }
        write_private(&self.index(app), serde_json::to_string_pretty(&all)?.as_bytes())?;
        Ok(true)
    }

    /// Removes every secret of `app` (the app was removed).
    pub fn remove_all(&self, app: &AppId) -> anyhow::Result<()> {
        for name in self.list(app)?.keys() {
            self.remove(app, name)?;
        }
        if self.dir.exists() {
            let _lock = self.lock()?;
            remove_file(&self.index(app))?;
        }
        Ok(())
    }

    /// The value of `app`'s secret `name`, kept where `set` says.
    pub fn value(&self, app: &AppId, name: &str, set: &Set) -> anyhow::Result<Value> {
        let at = (app.to_string(), name.to_string());
        if let Some((stamp, v)) = self.cache.lock().unwrap_or_else(|p| p.into_inner()).get(&at)
            && *stamp == set.stamp
        {
            return Ok(v.clone());
        }
        let text = match set.kept {
            Kept::File => {
                let file = self.value_file(app, name);
                let bytes = read_private(&file)?
                    .with_context(|| format!("the value of {name} is gone from {}", file.display()))?;
                String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("{} is damaged", file.display()))?
            }
            Kept::Keyring => self.keyring_get(app, name)?,
        };
        let value = Value::new(text);
        check_value(value.expose())?;
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).insert(at, (set.stamp.clone(), value.clone()));
        Ok(value)
    }

    fn keyring_set(&self, app: &AppId, name: &str, value: &Value) -> anyhow::Result<()> {
        let user = self.entry_user(app, name);
        let value = value.clone();
        keyring_call(move || keyring::Entry::new("autoapp", &user)?.set_password(value.expose()))
    }

    fn keyring_get(&self, app: &AppId, name: &str) -> anyhow::Result<String> {
        let user = self.entry_user(app, name);
        keyring_call(move || keyring::Entry::new("autoapp", &user)?.get_password())
    }

    fn keyring_remove(&self, app: &AppId, name: &str) -> anyhow::Result<()> {
        let user = self.entry_user(app, name);
        match keyring_call(move || keyring::Entry::new("autoapp", &user)?.delete_credential()) {
            Ok(()) => Ok(()),
            Err(e) if e.downcast_ref::<keyring::Error>().is_some_and(|k| matches!(k, keyring::Error::NoEntry)) => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

/// Runs one keyring call on a thread of its own (the Secret Service client
/// starts a runtime of its own, which may not run inside a runtime's
/// worker), given up after [`KEYRING_WAIT`]; refused at once while
/// [`KEYRING_STUCK`] have not answered.
fn keyring_call<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, keyring::Error> + Send + 'static,
) -> anyhow::Result<T> {
    keyring_call_within(&KEYRING_WAITING, KEYRING_WAIT, f)
}

const UNLOCK: &str = "is it locked? unlock it, or set secrets_kept_in = \"file\" in the root's config.toml";

fn keyring_call_within<T: Send + 'static>(
    waiting: &'static AtomicUsize,
    wait: Duration,
    f: impl FnOnce() -> Result<T, keyring::Error> + Send + 'static,
) -> anyhow::Result<T> {
    /// Counted among those not answered until its thread ends.
    struct Waiting(&'static AtomicUsize);
    impl Drop for Waiting {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::AcqRel);
        }
    }
    if waiting.fetch_add(1, Ordering::AcqRel) >= KEYRING_STUCK {
        waiting.fetch_sub(1, Ordering::AcqRel);
        anyhow::bail!("the keyring has not answered the last {KEYRING_STUCK} asks ({UNLOCK})");
    }
    let counted = Waiting(waiting);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("autoapp-keyring".into())
        .spawn(move || {
            let answer = f();
            drop(counted);
            let _ = tx.send(answer);
        })
        .context("cannot start a thread for the keyring")?;
    match rx.recv_timeout(wait) {
        Ok(r) => r.map_err(|e| anyhow::Error::new(e).context("the keyring refused")),
        Err(_) => anyhow::bail!("the keyring did not answer within {} s ({UNLOCK})", wait.as_secs()),
    }
}

/// A value the host can put in a header or a query and find again in what
/// comes back: 8 to 4096 characters of printable ASCII (an API key is), no
/// blank at either end.
pub fn check_value(v: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        v.len() >= VALUE_MIN,
        "a key must be at least {VALUE_MIN} characters (this one has {}): a shorter one could not be told apart from ordinary text in what comes back",
        v.chars().count()
    );
    anyhow::ensure!(v.len() <= VALUE_MAX, "a key may be at most {VALUE_MAX} characters (this one has {})", v.len());
    anyhow::ensure!(
        v.bytes().all(|b| (0x20..0x7f).contains(&b)),
        "a key is printable ASCII (letters, digits, punctuation): this one holds a line break, a control character or a character beyond ASCII; paste the key alone"
    );
    anyhow::ensure!(v.trim() == v, "a key may not start or end with a blank: paste the key alone");
    Ok(())
}

fn make_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    // Made before by something else, perhaps wider: narrowed.
    for d in [dir, dir.parent().unwrap_or(dir)] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot make {} private", d.display()))?;
    }
    Ok(())
}

/// A private file's bytes: none when it is not there; refused when it is
/// not a regular file of ours that others cannot read.
fn read_private(file: &Path) -> anyhow::Result<Option<Vec<u8>>> {
    use std::io::Read as _;
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let f = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(file) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
    };
    let meta = f.metadata()?;
    anyhow::ensure!(
        meta.is_file() && meta.mode() & 0o077 == 0,
        "{} may be read by others (mode {:o}): a file of keys is the person's alone; remove it and set the keys again",
        file.display(),
        meta.mode() & 0o777
    );
    let mut bytes = Vec::new();
    f.take(1 << 20).read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

/// Writes a private file whole (0600, a rename over the old one).
fn write_private(file: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = file.parent().context("a file of keys has a folder")?;
    let tmp = dir.join(format!(".{}.{}", &crate::secret::random_hex()[..12], std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    let written = f.write_all(bytes).and_then(|()| f.sync_all());
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", file.display()));
    }
    std::fs::rename(&tmp, file).with_context(|| format!("cannot write {}", file.display()))?;
    crate::root::sync_dir(dir)
}

fn remove_file(file: &Path) -> anyhow::Result<()> {
    match std::fs::remove_file(file) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot remove {}", file.display())),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;
    use crate::caps::network::Origin;
    use crate::caps::secret::Place;
    use crate::config::SecretsKeptIn;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    /// A keyring that never answers: each call given up at its time; with
    /// four unanswered, the next is refused at once and starts no thread
    /// (fails before: each call left a thread, and waited its whole time).
    #[test]
    fn a_keyring_that_never_answers_holds_at_most_four_threads() {
        static WAITING: AtomicUsize = AtomicUsize::new(0);
        let wait = Duration::from_millis(50);
        let (release, stuck) = std::sync::mpsc::channel::<()>();
        let stuck = std::sync::Arc::new(std::sync::Mutex::new(stuck));
        let hang = || {
            let stuck = stuck.clone();
            move || -> Result<(), keyring::Error> {
                let _ = stuck.lock().unwrap().recv();
                Err(keyring::Error::NoEntry)
            }
        };
        for _ in 0..KEYRING_STUCK {
            let e = keyring_call_within(&WAITING, wait, hang()).unwrap_err();
            assert!(e.to_string().contains("did not answer within"), "{e}");
        }
        let asked = std::time::Instant::now();
        let e = keyring_call_within(&WAITING, wait, hang()).unwrap_err();
        assert!(e.to_string().contains("has not answered the last 4 asks"), "{e}");
        assert!(asked.elapsed() < wait, "refused at once");
        assert_eq!(WAITING.load(Ordering::Acquire), KEYRING_STUCK);
        // It answers again: the threads end, and a call goes through.
        drop(release);
        let started = std::time::Instant::now();
        while WAITING.load(Ordering::Acquire) > 0 && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(keyring_call_within(&WAITING, wait, || Ok(7)).unwrap(), 7);
        assert_eq!(WAITING.load(Ordering::Acquire), 0);
    }

    /// A vault that keeps values in files, in a configuration folder and
    /// for a root of their own (both kept while the test runs).
    fn file_vault() -> (tempfile::TempDir, tempfile::TempDir, Vault) {
        let config = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        let vault = Vault::at(config.path(), root.path(), SecretsKeptIn::File);
        (config, root, vault)
    }

    /// The app `weather` and its key's binding.
    fn weather() -> (AppId, Binding) {
        let binding = Binding {
            origin: Origin::parse("https://api.weather.example").unwrap(),
            place: Place::Query { query: "appid".into() },
        };
        (AppId::parse("weather").unwrap(), binding)
    }

    #[test]
    fn a_key_kept_in_a_file_is_the_person_s_alone_and_never_under_the_root() {
        let (config, root, vault) = file_vault();
        let (app, binding) = weather();
        assert!(vault.list(&app).unwrap().is_empty());
        let set = vault.set(&app, "owm", &binding, &Value::new("0123456789abcdef".into())).unwrap();
        assert_eq!(set.kept, Kept::File);
        assert_eq!(set.binding, binding);
        assert_eq!(vault.list(&app).unwrap()["owm"], set);
        assert_eq!(vault.value(&app, "owm", &set).unwrap().expose(), "0123456789abcdef");

        // 0700 folders, 0600 files; nothing of it under the root.
        assert_eq!(mode(&config.path().join("secrets")), 0o700);
        assert_eq!(mode(&vault.dir), 0o700);
        for f in std::fs::read_dir(&vault.dir).unwrap() {
            let f = f.unwrap().path();
            assert_eq!(mode(&f), 0o600, "{}", f.display());
        }
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);

        // Set again: a new stamp, so a value read before is read anew.
        let again = vault.set(&app, "owm", &binding, &Value::new("fedcba9876543210".into())).unwrap();
        assert_ne!(again.stamp, set.stamp);
        assert_eq!(vault.value(&app, "owm", &again).unwrap().expose(), "fedcba9876543210");

        // A file others may read is refused, not used.
        let file = vault.value_file(&app, "owm");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let refused = vault.value(&app, "owm", &Set { stamp: "other".into(), ..again.clone() });
        assert!(format!("{:#}", refused.unwrap_err()).contains("may be read by others"));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();

        assert!(vault.remove(&app, "owm").unwrap());
        assert!(!vault.remove(&app, "owm").unwrap());
        assert!(!file.exists());
        assert!(vault.list(&app).unwrap().is_empty());
    }

    /// Issue 72, rule 6: with a keyring that does not answer, `secret remove`
    /// forgot the index first and left the value in the keyring, where
    /// nothing would find it again; a move out of the keyring did the same.
    /// The value goes first: when it cannot, the key stays listed as it was.
    #[test]
    fn a_value_the_keyring_does_not_let_go_stays_listed() {
        let (_config, _root, vault) = file_vault();
        let (app, binding) = weather();
        vault.set(&app, "owm", &binding, &Value::new("0123456789abcdef".into())).unwrap();
        // Listed as kept in the keyring (as a set where one answered leaves it).
        let mut all = vault.list(&app).unwrap();
        all.get_mut("owm").unwrap().kept = Kept::Keyring;
        write_private(&vault.index(&app), serde_json::to_string_pretty(&all).unwrap().as_bytes()).unwrap();
        let locked =
            |_: &AppId, _: &str| -> anyhow::Result<()> { anyhow::bail!("the keyring did not answer within 10 s") };
        let e = format!("{:#}", vault.remove_with(&app, "owm", &locked).unwrap_err());
        assert!(e.contains("stays listed") && e.contains("did not answer"), "{e}");
        assert_eq!(vault.list(&app).unwrap()["owm"].kept, Kept::Keyring, "still listed where it is");
        // A move from the keyring to the file: nothing changes either.
        let e = vault.set_with(&app, "owm", &binding, &Value::new("fedcba9876543210".into()), &locked).unwrap_err();
        assert!(format!("{e:#}").contains("nothing changed"), "{e:#}");
        assert_eq!(vault.list(&app).unwrap()["owm"], all["owm"]);
        assert!(!vault.value_file(&app, "owm").exists(), "the new value is not left in a file");
        // When the keyring lets go, it is gone from both.
        let removed = std::sync::atomic::AtomicBool::new(false);
        let answers = |_: &AppId, _: &str| -> anyhow::Result<()> {
            removed.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        };
        assert!(vault.remove_with(&app, "owm", &answers).unwrap());
        assert!(removed.into_inner() && vault.list(&app).unwrap().is_empty());
    }

    #[test]
    fn a_key_is_printable_ascii_of_eight_characters_or_more() {
        for bad in [
            "short",
            "line\nbreak-key",
            "tab\tinside-key",
            " padded-key",
            "padded-key ",
            "ключ-ключ-ключ",
            &"k".repeat(VALUE_MAX + 1),
        ] {
            assert!(check_value(bad).is_err(), "{bad:?}");
        }
        for good in ["12345678", "sk-live_0123456789abcdef", "user:pass word!"] {
            check_value(good).unwrap();
        }
    }
}
