//! The operating system's own folder window, for the panel's Create and
//! Backup, and its file window, for Install: the person points at a folder
//! or a package without the page ever listing their directories.
//!
//! `zenity` or `kdialog` on Linux, `osascript`'s `choose folder` on macOS, a
//! `FolderBrowserDialog` through PowerShell on Windows. Every script is a
//! constant; the window's title and the folder it starts in reach the program
//! as whole arguments (or, for PowerShell, environment variables), through an
//! argument vector and never a shell. One window is open at a time; one left
//! open is closed after [`OPEN_FOR`], and when the launcher stops.
//!
//! What the window answers is a string like any a person typed: the creation
//! checks it with the same rules as `create --at`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;

/// How long a window may stay open before it is closed.
pub const OPEN_FOR: Duration = Duration::from_secs(5 * 60);

/// The longest title kept (after the fixed prefix).
const MAX_TITLE: usize = 120;

/// The most a folder window's answer may be.
const MAX_ANSWER: usize = 64 * 1024;

/// The programs that can show a folder window, by platform.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Zenity,
    Kdialog,
    Osascript,
    PowerShell,
}

impl Kind {
    fn program(self) -> &'static str {
        match self {
            Kind::Zenity => "zenity",
            Kind::Kdialog => "kdialog",
            Kind::Osascript => "osascript",
            Kind::PowerShell => "powershell",
        }
    }

    /// The kinds to look for on this platform, in order.
    fn here() -> &'static [Kind] {
        if cfg!(target_os = "macos") {
            &[Kind::Osascript]
        } else if cfg!(windows) {
            &[Kind::PowerShell]
        } else {
            &[Kind::Zenity, Kind::Kdialog]
        }
    }
}

/// What the window picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// A folder (Create, Backup).
    Folder,
    /// A file: a package to install.
    Package,
}

/// The AppleScript that picks a file: title and start are `argv` items.
const APPLESCRIPT_FILE: &str = "on run argv
  if (count of argv) > 1 then
    return POSIX path of (choose file with prompt (item 1 of argv) default location (POSIX file (item 2 of argv)))
  else
    return POSIX path of (choose file with prompt (item 1 of argv))
  end if
end run";

/// The PowerShell script that picks a file: title and start are environment variables.
const POWERSHELL_FILE: &str = "Add-Type -AssemblyName System.Windows.Forms
$d = New-Object System.Windows.Forms.OpenFileDialog
$d.Title = $env:AUTOAPP_FOLDER_TITLE
$d.Filter = 'Autoapp packages (*.wasm)|*.wasm|All files (*.*)|*.*'
if ($env:AUTOAPP_FOLDER_START) { $d.InitialDirectory = $env:AUTOAPP_FOLDER_START }
if ($d.ShowDialog() -eq [System.Windows.Forms.DialogResult]::OK) { [Console]::Out.Write($d.FileName) } else { exit 1 }";

/// The AppleScript run by `osascript`: title and start are `argv` items.
const APPLESCRIPT: &str = "on run argv
  if (count of argv) > 1 then
    return POSIX path of (choose folder with prompt (item 1 of argv) default location (POSIX file (item 2 of argv)))
  else
    return POSIX path of (choose folder with prompt (item 1 of argv))
  end if
end run";

/// The PowerShell script: title and start are environment variables.
const POWERSHELL: &str = "Add-Type -AssemblyName System.Windows.Forms
$d = New-Object System.Windows.Forms.FolderBrowserDialog
$d.Description = $env:AUTOAPP_FOLDER_TITLE
if ($env:AUTOAPP_FOLDER_START) { $d.SelectedPath = $env:AUTOAPP_FOLDER_START }
if ($d.ShowDialog() -eq [System.Windows.Forms.DialogResult]::OK) { [Console]::Out.Write($d.SelectedPath) } else { exit 1 }";

/// A folder window's command: a program, its arguments, its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub env: Vec<(&'static str, OsString)>,
}

/// The title shown: a fixed prefix (so it never starts with `-`), then what
/// the panel asked, without control characters, cut short.
pub fn title(asked: &str) -> String {
    let asked: String = asked.chars().filter(|c| !c.is_control()).take(MAX_TITLE).collect();
    if asked.trim().is_empty() { "Autoapp: choose a folder".to_string() } else { format!("Autoapp: {asked}") }
}

/// Where the window starts: an existing folder's real (absolute) path, or
/// nothing (a start that is not an existing folder is dropped).
pub fn start(asked: Option<&str>) -> Option<PathBuf> {
    let p = Path::new(asked?);
    if !p.is_absolute() {
        return None;
    }
    std::fs::canonicalize(p).ok().filter(|p| p.is_dir())
}

/// The command that shows a window of `kind` (`program` is where it was
/// found) picking `pick`, titled `title`, starting in `start`.
pub fn command_for(pick: Pick, kind: Kind, program: &Path, title: &str, start: Option<&Path>) -> Command {
    let folder = pick == Pick::Folder;
    let mut args: Vec<OsString> = Vec::new();
    let mut env = Vec::new();
    match kind {
        Kind::Zenity => {
            args.push("--file-selection".into());
            if folder {
                args.push("--directory".into());
            }
            args.push(format!("--title={title}").into());
            if !folder {
                args.push("--file-filter=Autoapp packages (*.wasm) | *.wasm".into());
                args.push("--file-filter=All files | *".into());
            }
            if let Some(s) = start {
                let mut f = OsString::from("--filename=");
                f.push(s.join("").as_os_str());
                args.push(f);
            }
        }
        Kind::Kdialog => {
            args.push("--title".into());
            args.push(title.into());
            if folder {
                args.push("--getexistingdirectory".into());
                args.extend(start.map(|s| s.as_os_str().to_owned()));
            } else {
                args.push("--getopenfilename".into());
                args.push(start.map_or_else(|| OsString::from("."), |s| s.as_os_str().to_owned()));
                args.push("*.wasm".into());
            }
        }
        Kind::Osascript => {
            args.push("-e".into());
            args.push(if folder { APPLESCRIPT } else { APPLESCRIPT_FILE }.into());
            args.push(title.into());
            args.extend(start.map(|s| s.as_os_str().to_owned()));
        }
        Kind::PowerShell => {
            let script = if folder { POWERSHELL } else { POWERSHELL_FILE };
            args.extend(["-NoProfile", "-NonInteractive", "-STA", "-Command", script].map(OsString::from));
            env.push(("AUTOAPP_FOLDER_TITLE", title.into()));
            if let Some(s) = start {
                env.push(("AUTOAPP_FOLDER_START", s.as_os_str().to_owned()));
            }
        }
    }
    Command { program: program.to_path_buf(), args, env }
}

/// Why no folder came back.
#[derive(Debug, thiserror::Error)]
pub enum ChooseError {
    #[error("a folder window is open already; answer it (or close it) first")]
    Busy,
    #[error(
        "this computer has no folder window Autoapp can use (on Linux: install zenity or kdialog); type the folder instead"
    )]
    Unavailable,
    #[error("the folder window could not be shown ({0}); type the folder instead")]
    Failed(String),
}

/// The launcher's folder window: one at a time.
#[derive(Debug, Default)]
pub struct FolderWindow {
    open: tokio::sync::Mutex<()>,
}

impl FolderWindow {
    /// Shows the window and waits for the person: `Ok(Some(folder))`, or
    /// `Ok(None)` when they cancelled, it was open too long, or the launcher
    /// is stopping.
    pub async fn choose(
        &self,
        asked_title: &str,
        asked_start: Option<&str>,
        stopping: watch::Receiver<bool>,
    ) -> Result<Option<String>, ChooseError> {
        self.pick(Pick::Folder, asked_title, asked_start, stopping).await
    }

    /// Shows the window picking `pick` (see [`FolderWindow::choose`]).
    pub async fn pick(
        &self,
        pick: Pick,
        asked_title: &str,
        asked_start: Option<&str>,
        mut stopping: watch::Receiver<bool>,
    ) -> Result<Option<String>, ChooseError> {
        let _open = self.open.try_lock().map_err(|_| ChooseError::Busy)?;
        let (kind, program) = Kind::here()
            .iter()
            .find_map(|k| crate::programs::find(k.program()).ok().map(|p| (*k, p)))
            .ok_or(ChooseError::Unavailable)?;
        let start = start(asked_start).or_else(|| std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_dir()));
        let c = command_for(pick, kind, &program, &title(asked_title), start.as_deref());
        let mut cmd = tokio::process::Command::new(&c.program);
        cmd.args(&c.args)
            .envs(c.env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        let child = cmd.spawn().map_err(|e| ChooseError::Failed(e.to_string()))?;
        tracing::info!(program = %c.program.display(), "a folder window is open");
        let answer = tokio::select! {
            out = child.wait_with_output() => out.map_err(|e| ChooseError::Failed(e.to_string()))?,
            _ = tokio::time::sleep(OPEN_FOR) => {
                tracing::info!("the folder window was open for five minutes and is closed");
                return Ok(None);
            }
            _ = stopping.wait_for(|s| *s) => return Ok(None),
        };
        if !answer.status.success() || answer.stdout.len() > MAX_ANSWER {
            return Ok(None);
        }
        let text =
            String::from_utf8(answer.stdout).map_err(|_| ChooseError::Failed("its answer is not text".into()))?;
        let folder = text.trim_end_matches(['\n', '\r']);
        Ok((!folder.is_empty()).then(|| folder.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &[&str] = &[
        "\"; rm -rf ~ #",
        "$(id)",
        "`id`",
        "--filename=/etc",
        "x' & calc & '",
        "a\nb",
        "end run\ndo shell script \"id\"",
    ];

    #[test]
    fn a_hostile_title_or_start_is_one_argument_and_no_script_changes() {
        let dir = tempfile::tempdir().unwrap();
        for hostile in HOSTILE {
            // A start folder with the hostile name, so that it is kept.
            let start_dir = dir.path().join(hostile.replace('/', "_"));
            std::fs::create_dir_all(&start_dir).unwrap();
            let start = start(start_dir.to_str()).expect("an existing folder is kept");
            let t = title(hostile);
            assert!(t.starts_with("Autoapp: "), "{t}");
            for kind in [Kind::Zenity, Kind::Kdialog, Kind::Osascript, Kind::PowerShell] {
                let c = command_for(Pick::Folder, kind, Path::new("/x"), &t, Some(&start));
                match kind {
                    Kind::Zenity => assert_eq!(
                        c.args,
                        [
                            OsString::from("--file-selection"),
                            "--directory".into(),
                            format!("--title={t}").into(),
                            format!("--filename={}/", start.display()).into()
                        ]
                    ),
                    Kind::Kdialog => assert_eq!(
                        c.args,
                        [
                            OsString::from("--title"),
                            t.clone().into(),
                            "--getexistingdirectory".into(),
                            start.clone().into_os_string()
                        ]
                    ),
                    Kind::Osascript => {
                        assert_eq!(
                            c.args,
                            [OsString::from("-e"), APPLESCRIPT.into(), t.clone().into(), start.clone().into()]
                        )
                    }
                    Kind::PowerShell => {
                        assert_eq!(c.args.last().unwrap(), POWERSHELL);
                        assert_eq!(c.args.len(), 5);
                        assert_eq!(
                            c.env,
                            [
                                ("AUTOAPP_FOLDER_TITLE", t.clone().into()),
                                ("AUTOAPP_FOLDER_START", start.clone().into())
                            ]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_title_loses_control_characters_and_is_cut_and_never_starts_with_a_dash() {
        assert_eq!(title("a\nb\u{7}c"), "Autoapp: abc");
        assert_eq!(title("--help"), "Autoapp: --help");
        assert_eq!(title(""), "Autoapp: choose a folder");
        assert_eq!(title(&"x".repeat(500)).len(), "Autoapp: ".len() + MAX_TITLE);
    }

    #[test]
    fn a_start_that_is_not_an_existing_absolute_folder_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("file"), "x").unwrap();
        assert_eq!(start(None), None);
        assert_eq!(start(Some("relative/folder")), None);
        assert_eq!(start(Some("/no/such/folder/anywhere")), None);
        assert_eq!(start(dir.path().join("file").to_str()), None);
        assert_eq!(start(dir.path().to_str()), Some(std::fs::canonicalize(dir.path()).unwrap()));
    }

    #[test]
    fn a_file_window_picks_a_file_with_the_title_as_one_argument() {
        let t = title("$(id)\" --directory");
        let start = std::env::temp_dir();
        let z = command_for(Pick::Package, Kind::Zenity, Path::new("/z"), &t, Some(&start));
        assert!(!z.args.iter().any(|a| a == "--directory"), "{:?}", z.args);
        assert!(z.args.contains(&format!("--title={t}").into()));
        let k = command_for(Pick::Package, Kind::Kdialog, Path::new("/k"), &t, None);
        assert_eq!(
            k.args,
            [OsString::from("--title"), t.clone().into(), "--getopenfilename".into(), ".".into(), "*.wasm".into()]
        );
        let o = command_for(Pick::Package, Kind::Osascript, Path::new("/o"), &t, None);
        assert_eq!(o.args, [OsString::from("-e"), APPLESCRIPT_FILE.into(), t.clone().into()]);
        let p = command_for(Pick::Package, Kind::PowerShell, Path::new("/p"), &t, None);
        assert_eq!(p.args.last().unwrap(), POWERSHELL_FILE);
        assert_eq!(p.env, [("AUTOAPP_FOLDER_TITLE", OsString::from(&t))]);
        // The folder window is unchanged.
        assert_eq!(
            command_for(Pick::Folder, Kind::Zenity, Path::new("/z"), &t, None),
            command_for(Pick::Folder, Kind::Zenity, Path::new("/z"), &t, None)
        );
    }
}
