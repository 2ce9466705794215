//! `autoapp create` and `autoapp wit`: the starter template and the WIT
//! package, both compiled into the binary so it needs no files beside it.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use include_dir::{Dir, include_dir};

use crate::manifest::{AppId, MANIFEST_FILE};
use crate::root::{Root, write_atomic};

static TEMPLATE: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../starter-template");
static WIT: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../wit");

/// What `create` did.
#[derive(Debug, serde::Serialize)]
pub struct Created {
    pub app: String,
    pub workspace: PathBuf,
    /// True when an existing workspace (with a matching manifest) was
    /// registered instead of writing the template.
    pub adopted: bool,
}

/// Writes the WIT package and its WASI dependencies into `dir`.
pub fn write_wit(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    write_dir(&WIT, dir, &|s| s.to_string(), &mut written)?;
    Ok(written)
}

fn write_dir(d: &Dir<'_>, to: &Path, fill: &dyn Fn(&str) -> String, written: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for f in d.files() {
        let path = to.join(f.path());
        let bytes = match f.contents_utf8() {
            Some(text) => fill(text).into_bytes(),
            None => f.contents().to_vec(),
        };
        write_atomic(&path, &bytes)?;
        written.push(path);
    }
    for sub in d.dirs() {
        if sub.path().file_name().is_some_and(|n| n == "target") {
            continue;
        }
        write_dir(sub, to, fill, written)?;
    }
    Ok(())
}

/// Creates app `id`: writes the starter template (and a copy of the WIT) to its
/// workspace — the default one in the root, or `at` — and registers it. An
/// `at` folder that already holds a manifest with this id is registered as it
/// is, nothing written.
///
/// Recorded in the new app's record as `create`, by `caller` (a refused
/// creation makes no app, so it has no record to go to).
pub fn create(caller: &crate::gate::Caller, root: &Root, id: &AppId, at: Option<&Path>) -> anyhow::Result<Created> {
    let done = make(root, id, at);
    let arguments = serde_json::json!({ "at": at });
    crate::gate::record::recorded(&root.app(id), caller, "create", arguments, done, |c| {
        let how = if c.adopted { "registered its existing workspace" } else { "created its workspace" };
        (String::new(), format!("{how} {}", c.workspace.display()))
    })
}

fn make(root: &Root, id: &AppId, at: Option<&Path>) -> anyhow::Result<Created> {
    let app = root.app(id);
    if app.exists() {
        let ws = crate::workspace::of(&app).unwrap_or_else(|_| app.default_workspace());
        anyhow::bail!(
            "the app {id} exists already (its workspace is {}); build it with `autoapp build {id}`",
            ws.display()
        );
    }
    let workspace = match at {
        None => app.default_workspace(),
        Some(dir) => {
            let dir = absolute(dir)?;
            crate::workspace::check_chosen(root, id, &dir)?;
            dir
        }
    };
    let adopted = if workspace.join(MANIFEST_FILE).is_file() {
        // Only the id matters here; the build reports every other problem.
        let text = std::fs::read_to_string(workspace.join(MANIFEST_FILE))?;
        let declared = toml::from_str::<toml::Table>(&text)
            .ok()
            .and_then(|t| t.get("app")?.get("id")?.as_str().map(str::to_string));
        match declared {
            Some(d) if d == id.as_str() => {}
            Some(d) => anyhow::bail!(
                "{} already holds the app `{}`; create `{}` instead, or choose another folder",
                workspace.display(),
                d.escape_debug(),
                d.escape_debug()
            ),
            None => anyhow::bail!(
                "{} holds an {MANIFEST_FILE} without an [app] id; add id = \"{id}\" to its [app] table and create again",
                workspace.join(MANIFEST_FILE).display()
            ),
        }
        true
    } else {
        if workspace.is_dir() && std::fs::read_dir(&workspace)?.next().is_some() {
            anyhow::bail!(
                "{} is not empty and holds no {MANIFEST_FILE}; choose a new or empty folder",
                workspace.display()
            );
        }
        let name = title_case(id.as_str());
        let fill = |text: &str| text.replace("{{app_id}}", id.as_str()).replace("{{app_name}}", &name);
        let mut written = Vec::new();
        write_dir(&TEMPLATE, &workspace, &fill, &mut written)?;
        write_wit(&workspace.join("wit"))?;
        false
    };
    std::fs::create_dir_all(&app.dir).with_context(|| format!("cannot create {}", app.dir.display()))?;
    if at.is_some() {
        write_atomic(&app.workspace_pointer(), format!("{}\n", workspace.display()).as_bytes())?;
    }
    Ok(Created { app: id.to_string(), workspace, adopted })
}

fn absolute(dir: &Path) -> anyhow::Result<PathBuf> {
    if dir.is_absolute() {
        Ok(dir.to_path_buf())
    } else {
        Ok(std::env::current_dir().context("cannot read the current folder")?.join(dir))
    }
}

fn title_case(id: &str) -> String {
    id.split('-')
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
