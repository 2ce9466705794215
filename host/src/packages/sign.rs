//! Publisher keys and the signature a package carries.
//!
//! A publisher's key is an Ed25519 key made by `autoapp key new`, kept in
//! the person's configuration folder (`$XDG_CONFIG_HOME/autoapp/`, else
//! `~/.config/autoapp/`), never under the root or an app: `publisher.key`,
//! mode 0600, in a folder of mode 0700. A key file anyone else may read is
//! refused (as ssh refuses one).
//!
//! The signature is the last custom section of the package,
//! `autoapp:signature`, holding JSON
//! `{"format": "autoapp-signature", "version": 1, "publisher": NAME, "key": HEX(32), "signature": HEX(64)}`.
//! What is signed is [`message`]: a domain string, the SHA-256 of every byte
//! before the signature section (the component and Autoapp's other
//! sections), the publisher's name and the key, each framed by its length —
//! so neither the bytes, nor the name shown to the person, nor the key can be
//! changed without the signature failing. A key is named by its
//! **fingerprint**: the first 16 bytes of the SHA-256 of the public key, in
//! hex.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::format::{self, Package};

/// The key file's name in the configuration folder.
pub const KEY_FILE: &str = "publisher.key";
/// What a signature section says it is.
pub const SIGNATURE_FORMAT: &str = "autoapp-signature";
pub const SIGNATURE_VERSION: u32 = 1;
/// The longest publisher name: it is shown to every person who installs.
pub const MAX_NAME: usize = 100;

/// What a signature says and what checking it found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Publisher {
    /// The publisher's name as the signature gives it (cleaned for showing:
    /// no control or format characters; it is the publisher's words).
    pub name: String,
    pub fingerprint: String,
    /// The public key, in hex: what an install pins.
    pub key: String,
}

/// Why a signature does not hold: each a sentence.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SignatureError {
    #[error("its signature section is not one Autoapp reads: {0}")]
    Malformed(String),
    #[error(
        "its signature does not verify with the key it names ({0}): the file was changed after it was signed, or the signature was made for other bytes"
    )]
    DoesNotVerify(String),
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    format: String,
    version: u32,
    publisher: String,
    key: String,
    signature: String,
}

/// The key file: the person's, with its name.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    name: String,
    /// The Ed25519 secret key's 32 bytes, in hex.
    secret: String,
    created_at: String,
}

/// A publisher's signing key, loaded.
pub struct Key {
    pub name: String,
    signing: SigningKey,
    pub file: PathBuf,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key").field("name", &self.name).field("fingerprint", &self.fingerprint()).finish()
    }
}

/// The fingerprint of a public key.
pub fn fingerprint(public: &[u8; 32]) -> String {
    hex::encode(&Sha256::digest(public)[..16])
}

impl Key {
    pub fn fingerprint(&self) -> String {
        fingerprint(self.signing.verifying_key().as_bytes())
    }

    pub fn public_hex(&self) -> String {
        hex::encode(self.signing.verifying_key().as_bytes())
    }
}

/// Checks a publisher's name: what every person who installs will read,
/// always after the host's own words and the key's fingerprint, and quoted
/// ([`who`]). So that it can never pass for them, a name holds no control
/// or invisible format character, no character that shows as blank or as
/// nothing but single ASCII spaces between words ([`is_blank`]), no double
/// quote (it would close the quotes the host puts around it), and not the
/// word "fingerprint" (the host's word for the key).
pub fn check_name(name: &str) -> Result<(), String> {
    check_name_pinned(name)?;
    if let Some(c) = name.chars().find(|&c| c != ' ' && is_blank(c)) {
        return Err(format!(
            "a publisher's name may hold no blank or invisible character but a plain space (it holds U+{:04X})",
            c as u32
        ));
    }
    if let Some(c) = name.chars().find(|&c| is_look_alike(c)) {
        return Err(format!(
            "a publisher's name may hold no character that imitates a quote or spells ASCII in another form, such as a fullwidth letter or a ligature (it holds U+{:04X} {c}); write it in plain letters",
            c as u32
        ));
    }
    if name.starts_with(' ') || name.ends_with(' ') || name.contains("  ") {
        return Err("a publisher's name has single spaces between words, none at its ends".into());
    }
    if name.contains('"') {
        return Err("a publisher's name may hold no double quote (\")".into());
    }
    if name.to_lowercase().contains("fingerprint") {
        return Err("a publisher's name may not hold the word \"fingerprint\": the host names the key by it".into());
    }
    Ok(())
}

/// What a name pinned already must be (`publisher.json`, in this root or a
/// backup's): not empty, at most [`MAX_NAME`], no control or invisible format
/// character. A pin made before [`check_name`] grew stricter keeps working;
/// it is always said quoted after its fingerprint ([`who`]), escaped.
pub fn check_name_pinned(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err("a publisher's name may not be empty".into());
    }
    crate::elsewhere::text::within("publisher's name", name, MAX_NAME)?;
    if name.chars().any(|c| c.is_control() || crate::elsewhere::text::is_format(c)) {
        return Err("a publisher's name may hold no control or invisible format characters".into());
    }
    Ok(())
}

/// Whether `c` imitates a double quote or spells an ASCII word in other
/// forms: the typographic quotes and guillemets, the Latin ligatures (`ﬁ`),
/// the fullwidth forms of ASCII — so that neither "fingerprint" nor the
/// host's quotes can be written in these look-alikes. (Letters of other
/// scripts that look Latin are not refused: the fingerprint, said first,
/// is what names the key.)
fn is_look_alike(c: char) -> bool {
    matches!(c as u32,
        0x201C..=0x201F | 0x2033 | 0x2036 | 0x301D..=0x301F | 0x00AB | 0x00BB
        | 0xFB00..=0xFB06
        | 0xFF01..=0xFF5E)
}

/// Whether `c` shows as blank space or as nothing at all: Unicode's white
/// space (every separator: U+00A0, U+2000–U+200A, U+3000, …), its default
/// ignorable code points (U+034F, the variation selectors, the Hangul
/// fillers, the tags, …), and the characters that draw as an empty cell (the
/// blank Braille pattern U+2800).
pub fn is_blank(c: char) -> bool {
    c.is_whitespace()
        || crate::elsewhere::text::is_format(c)
        || matches!(c as u32,
            0x00AD | 0x034F | 0x115F | 0x1160 | 0x17B4 | 0x17B5
            | 0x180B..=0x180F
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x206F
            | 0x2800
            | 0x3164
            | 0xFE00..=0xFE0F
            | 0xFEFF
            | 0xFFA0
            | 0xFFF0..=0xFFF8
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0000..=0xE0FFF)
}

/// How the host names a publisher to the person: the key's fingerprint
/// first, then the name the publisher chose, quoted (and escaped: a name
/// pinned or signed before [`check_name`] grew stricter still cannot move
/// the terminal).
pub fn who(fingerprint: &str, name: &str) -> String {
    format!("fingerprint {} {}", crate::elsewhere::text::terminal(fingerprint), crate::elsewhere::named(name))
}

/// The bytes of a key written in hex, only when it is written as the host
/// writes one: lowercase, 64 digits. An uppercase key's text would verify
/// the same and be pinned as another text (`check_pinned` compares bytes,
/// and a signature holds only the canonical text).
pub fn key_bytes(hex_text: &str) -> Option<[u8; 32]> {
    let bytes: [u8; 32] = hex::decode(hex_text).ok()?.try_into().ok()?;
    (hex::encode(bytes) == hex_text).then_some(bytes)
}

/// Makes a new key named `name` in `dir`; refuses when one exists there
/// (a key is never written over: packages signed with it would lose their
/// publisher).
pub fn new_key(dir: &Path, name: &str) -> anyhow::Result<Key> {
    use std::io::Write as _;
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    check_name(name).map_err(anyhow::Error::msg)?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let file = dir.join(KEY_FILE);
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|e| anyhow::anyhow!("the system gave no random bytes for a key: {e}"))?;
    let contents = KeyFile {
        name: name.to_string(),
        secret: hex::encode(secret),
        created_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    };
    let mut f = match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&file) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => anyhow::bail!(
            "a publisher key exists already in {}; `autoapp key show` shows it (a key is never replaced: packages signed with it name it)",
            file.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("cannot write {}", file.display())),
    };
    f.write_all(serde_json::to_string_pretty(&contents)?.as_bytes())?;
    f.sync_all()?;
    crate::root::sync_dir(dir)?;
    Ok(Key { name: name.to_string(), signing: SigningKey::from_bytes(&secret), file })
}

/// The key in `dir`, when there is one.
pub fn load(dir: &Path) -> anyhow::Result<Option<Key>> {
    use std::os::unix::fs::MetadataExt as _;
    let file = dir.join(KEY_FILE);
    let meta = match std::fs::symlink_metadata(&file) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
    };
    anyhow::ensure!(meta.is_file(), "{} is not a regular file; a key is one file of mode 0600", file.display());
    anyhow::ensure!(
        meta.mode() & 0o077 == 0,
        "{} may be read by others (mode {:o}); a signing key must be yours alone: `chmod 600 {}`",
        file.display(),
        meta.mode() & 0o777,
        file.display()
    );
    anyhow::ensure!(meta.len() <= 4096, "{} is not a key file (it is larger than one)", file.display());
    let text = std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
    let k: KeyFile = serde_json::from_str(&text).with_context(|| format!("{} is not a key file", file.display()))?;
    let secret: [u8; 32] = hex::decode(&k.secret)
        .ok()
        .and_then(|b| b.try_into().ok())
        .with_context(|| format!("{} holds no 32-byte key", file.display()))?;
    Ok(Some(Key { name: k.name, signing: SigningKey::from_bytes(&secret), file }))
}

/// What a signature signs: see the module's documentation.
fn message(signed: &[u8], publisher: &str, key: &[u8; 32]) -> Vec<u8> {
    let mut m = Vec::with_capacity(128 + publisher.len());
    let mut part = |bytes: &[u8]| {
        m.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        m.extend_from_slice(bytes);
    };
    part(b"autoapp package signature v1");
    part(&Sha256::digest(signed));
    part(publisher.as_bytes());
    part(key);
    m
}

/// Signs the unsigned package `unsigned` (as [`format::pack`] wrote it):
/// the same bytes with the signature section appended.
pub fn sign(mut unsigned: Vec<u8>, key: &Key) -> Vec<u8> {
    let public = key.signing.verifying_key();
    let signature = key.signing.sign(&message(&unsigned, &key.name, public.as_bytes()));
    let section = Section {
        format: SIGNATURE_FORMAT.into(),
        version: SIGNATURE_VERSION,
        publisher: key.name.clone(),
        key: hex::encode(public.as_bytes()),
        signature: hex::encode(signature.to_bytes()),
    };
    let payload = serde_json::to_vec(&section).expect("JSON of strings");
    format::push_section(&mut unsigned, format::SIGNATURE_SECTION, &payload);
    unsigned
}

/// Checks the signature of `package`: `Ok(None)` when it has none,
/// `Ok(Some(publisher))` when it verifies (strictly: no weak keys, no
/// malleable signatures), else the sentence.
pub fn verify(package: &Package<'_>) -> Result<Option<Publisher>, SignatureError> {
    let Some(payload) = package.signature else { return Ok(None) };
    let s: Section = serde_json::from_slice(payload).map_err(|e| SignatureError::Malformed(e.to_string()))?;
    if s.format != SIGNATURE_FORMAT {
        return Err(SignatureError::Malformed(format!("its format is not {SIGNATURE_FORMAT}")));
    }
    if s.version != SIGNATURE_VERSION {
        return Err(SignatureError::Malformed(format!(
            "it is version {} and this Autoapp reads version {SIGNATURE_VERSION}",
            s.version
        )));
    }
    check_name(&s.publisher).map_err(SignatureError::Malformed)?;
    // Written only as the host writes them: one text per key, so a pin of
    // the text is a pin of the key.
    let key: [u8; 32] = key_bytes(&s.key)
        .ok_or_else(|| SignatureError::Malformed("its key is not 32 bytes in lowercase hex".into()))?;
    let signature: [u8; 64] = hex::decode(&s.signature)
        .ok()
        .and_then(|b| b.try_into().ok())
        .filter(|b: &[u8; 64]| hex::encode(b) == s.signature)
        .ok_or_else(|| SignatureError::Malformed("its signature is not 64 bytes in lowercase hex".into()))?;
    let fp = fingerprint(&key);
    let verifying = VerifyingKey::from_bytes(&key).map_err(|_| SignatureError::DoesNotVerify(fp.clone()))?;
    verifying
        .verify_strict(&message(package.signed, &s.publisher, &key), &ed25519_dalek::Signature::from_bytes(&signature))
        .map_err(|_| SignatureError::DoesNotVerify(fp.clone()))?;
    Ok(Some(Publisher { name: s.publisher, fingerprint: fp, key: s.key }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key shows its name and fingerprint when debugged, never its secret.
    #[test]
    fn a_key_debugs_as_its_name_and_fingerprint_alone() {
        let dir = tempfile::tempdir().unwrap();
        let key = new_key(dir.path(), "Ada").unwrap();
        let shown = format!("{key:?}");
        assert_eq!(shown, format!("Key {{ name: \"Ada\", fingerprint: {:?} }}", key.fingerprint()));
        let secret = hex::encode(key.signing.to_bytes());
        assert!(!shown.contains(&secret));
    }
    use crate::packages::format::{Contents, pack, push_section, read};
    use crate::release::Migration;

    fn unsigned() -> Vec<u8> {
        let mut c = vec![0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];
        push_section(&mut c, "component-type:x", b"\x01");
        let m = [Migration { name: "migrations/0001.sql".into(), sql: "CREATE TABLE t (x);".into() }];
        pack(&Contents {
            component: &c,
            manifest_text: "[app]\nid = \"a\"\n",
            migrations: &m,
            wit: "autoapp:app@0.1.0",
        })
        .unwrap()
    }

    fn key(dir: &Path, name: &str) -> Key {
        new_key(dir, name).unwrap()
    }

    #[test]
    fn a_signed_package_verifies_and_names_its_publisher_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let k = key(dir.path(), "Ada's Apps");
        let signed = sign(unsigned(), &k);
        let p = verify(&read(&signed).unwrap()).unwrap().unwrap();
        assert_eq!(p.name, "Ada's Apps");
        assert_eq!(p.fingerprint, k.fingerprint());
        assert_eq!(p.key, k.public_hex());
        assert_eq!(p.fingerprint.len(), 32);
        assert_eq!(verify(&read(&unsigned()).unwrap()), Ok(None));
    }

    #[test]
    fn any_changed_byte_fails_the_signature() {
        let dir = tempfile::tempdir().unwrap();
        let k = key(dir.path(), "Ada");
        let signed = sign(unsigned(), &k);
        let sig_start = read(&signed).unwrap().signed.len();
        // Every byte the signature covers, flipped in turn: refused (as a
        // signature that fails, or a file that no longer reads).
        for i in 8..sig_start {
            let mut changed = signed.clone();
            changed[i] ^= 0x01;
            if let Ok(p) = read(&changed) {
                assert!(verify(&p).is_err(), "byte {i} changed and the signature still verified");
            }
        }
    }

    #[test]
    fn the_name_and_the_key_are_signed_too() {
        let dir = tempfile::tempdir().unwrap();
        let k = key(dir.path(), "Ada");
        let signed = sign(unsigned(), &k);
        let p = read(&signed).unwrap();
        let s: serde_json::Value = serde_json::from_slice(p.signature.unwrap()).unwrap();
        // Another name under the same signature.
        let mut renamed = p.signed.to_vec();
        let mut v = s.clone();
        v["publisher"] = "Trusted Corp".into();
        push_section(&mut renamed, format::SIGNATURE_SECTION, v.to_string().as_bytes());
        assert!(matches!(verify(&read(&renamed).unwrap()), Err(SignatureError::DoesNotVerify(_))));
        // Another key with the signature of the first.
        let other = key(tempfile::tempdir().unwrap().path(), "Ada");
        let mut rekeyed = p.signed.to_vec();
        let mut v = s.clone();
        v["key"] = other.public_hex().into();
        push_section(&mut rekeyed, format::SIGNATURE_SECTION, v.to_string().as_bytes());
        assert!(matches!(verify(&read(&rekeyed).unwrap()), Err(SignatureError::DoesNotVerify(_))));
        // Issue 51, rule 7: the same key and signature in uppercase hex
        // verified, and pinned a text no genuine update matched. Refused.
        for field in ["key", "signature"] {
            let mut upper = p.signed.to_vec();
            let mut v = s.clone();
            v[field] = v[field].as_str().unwrap().to_uppercase().into();
            push_section(&mut upper, format::SIGNATURE_SECTION, v.to_string().as_bytes());
            let e = verify(&read(&upper).unwrap()).unwrap_err();
            assert!(matches!(&e, SignatureError::Malformed(m) if m.contains("lowercase hex")), "{field}: {e:?}");
        }
        // A signature section that is not ours to read.
        for bad in [
            r#"{"format":"x"}"#,
            "not json",
            r#"{"format":"autoapp-signature","version":2,"publisher":"a","key":"00","signature":"00"}"#,
        ] {
            let mut b = p.signed.to_vec();
            push_section(&mut b, format::SIGNATURE_SECTION, bad.as_bytes());
            assert!(matches!(verify(&read(&b).unwrap()), Err(SignatureError::Malformed(_))), "{bad}");
        }
    }

    #[test]
    fn a_key_is_never_replaced_and_one_others_may_read_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let k = key(dir.path(), "Ada");
        let mode = std::fs::metadata(dir.path().join(KEY_FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let e = new_key(dir.path(), "Eve").unwrap_err().to_string();
        assert!(e.contains("exists already"), "{e}");
        assert_eq!(load(dir.path()).unwrap().unwrap().fingerprint(), k.fingerprint());
        std::fs::set_permissions(dir.path().join(KEY_FILE), std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("may be read by others"), "{e}");
        assert!(load(tempfile::tempdir().unwrap().path()).unwrap().is_none());
        // A folder that cannot be read is said so, not taken for "no key".
        let not_a_folder = dir.path().join(KEY_FILE);
        let e = load(&not_a_folder).unwrap_err().to_string();
        assert!(e.contains("cannot read"), "{e}");
    }

    #[test]
    fn a_publisher_name_is_bounded_and_shows_nothing_invisible() {
        assert!(check_name("Ada's Apps").is_ok());
        assert!(check_name("  ").is_err());
        assert!(check_name(&"a".repeat(MAX_NAME + 1)).is_err());
        assert!(check_name("Trusted\u{202e}Corp").is_err());
        assert!(check_name("Trusted\u{1b}[2K").is_err());
        // Issue 51, rule 6: the red team's names.
        for name in [
            "Trusted Apps (fingerprint 12e56a): the same publisher as the app you have",
            "Trusted Apps (FINGERPRINT 12e56a)",
            "Trusted\u{34f}Apps",
            "Trusted\u{2800}Apps",
            "Trusted\u{3000}Apps",
            "Trusted\u{a0}Apps",
            "Trusted\u{fe0f}Apps",
            "Trusted  Apps",
            " Trusted",
            "Trusted \"Apps\": the same publisher",
            "Trusted \u{201c}Apps\u{201d}",
            "Trusted \u{ff02}Apps",
            "Trusted (\u{fb01}ngerprint 12e5)",
        ] {
            assert!(check_name(name).is_err(), "{name:?}");
        }
        assert!(check_name("Ada Lovelace's Apps (London)").is_ok());
        // Issue 73, point 3: each refused for what it is — a fullwidth letter
        // is not blank.
        let fullwidth = check_name("Trusted \u{ff21}pps").unwrap_err();
        assert!(fullwidth.contains("fullwidth letter") && !fullwidth.contains("blank"), "{fullwidth}");
        let blank = check_name("Trusted\u{3000}Apps").unwrap_err();
        assert!(blank.contains("blank or invisible"), "{blank}");
        assert_eq!(who("ab12", "Ada"), "fingerprint ab12 \"Ada\"");
        let dir = tempfile::tempdir().unwrap();
        assert!(new_key(dir.path(), "Eve\u{200b}").is_err());
    }
}
