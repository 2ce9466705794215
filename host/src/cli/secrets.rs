//! `autoapp secret set|list|remove`: the keys apps use and never hold
//! ([`crate::secrets`]). A value is read without echo from the terminal, or
//! from standard input when it is not one; never from an argument, so it is
//! in no process list and no shell history.

use std::io::{IsTerminal as _, Read as _};

use super::{Failure, app_id, print_json};
use crate::gate::Caller;
use crate::root::Root;
use crate::secrets::{self, Value, Vault};

/// What `autoapp secret` does.
#[derive(clap::Subcommand, Debug)]
pub enum SecretAction {
    /// Set a key the app's release declares: typed without echo (or piped in).
    ///
    /// The key is bound to where the release sends it — one origin, one header
    /// or query parameter — and the host adds it to the app's requests to that
    /// origin only; the app never reads it. A release that moves it elsewhere does
    /// not get it until you set it again for the new place.
    Set {
        app: String,
        /// The secret's name, as the release declares it (`autoapp secret list` shows them)
        name: String,
        /// Bind it as this release declares it (a unique prefix of its id) [default: the newest release]
        #[arg(long, value_name = "ID")]
        release: Option<String>,
    },
    /// Show the keys an app's release declares, where each goes and when it was set: never a value.
    List {
        app: String,
        /// The release whose declarations to compare with [default: the newest release]
        #[arg(long, value_name = "ID")]
        release: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Remove a key you set: the app's requests go without it from the next call on.
    Remove { app: String, name: String },
}

fn vault(root: &Root) -> Result<Vault, Failure> {
    let config = crate::config::Config::load(root.dir())?;
    Ok(Vault::of(root.dir(), config.secrets_kept_in)?)
}

/// `autoapp secret …`.
pub(super) fn secret(root: Root, action: SecretAction) -> Result<(), Failure> {
    match action {
        SecretAction::Set { app, name, release } => {
            let id = app_id(&app)?;
            // Which key, and for what, before the person types it.
            let listed = secrets::list(&root, &vault(&root)?, &id, release.as_deref())?;
            let Some(this) = listed.iter().find(|l| l.name == name && l.binding.is_some()) else {
                let declared: Vec<&str> =
                    listed.iter().filter(|l| l.binding.is_some()).map(|l| l.name.as_str()).collect();
                return Err(Failure {
                    code: 1,
                    message: match declared.is_empty() {
                        true => format!("{id} declares no secret"),
                        false => format!(
                            "{id} declares no secret `{}`; it declares {}",
                            name.escape_debug(),
                            declared.join(", ")
                        ),
                    },
                });
            };
            let value = read_value(&format!(
                "the key `{}` of {id} ({}), sent to {}",
                this.name,
                this.summary.as_deref().unwrap_or(""),
                this.binding.as_deref().unwrap_or("")
            ))?;
            let (cap, set) =
                secrets::set(&root, &vault(&root)?, &Caller::command_line(), &id, &name, &value, release.as_deref())?;
            say!(
                "set {}: sent only to {} ({}); kept in the {}",
                cap.name,
                cap.binding.origin,
                cap.binding.place,
                secrets::kept_said(set.kept)
            );
            Ok(())
        }
        SecretAction::List { app, release, json } => {
            let id = app_id(&app)?;
            let listed = secrets::list(&root, &vault(&root)?, &id, release.as_deref())?;
            if json {
                return print_json(&listed);
            }
            if listed.is_empty() {
                say!("{id} declares no secret");
            }
            for l in listed {
                let state = match l.state {
                    "set" => format!("set on {}", l.set_at.as_deref().unwrap_or("?")),
                    "not set" => format!("not set: `autoapp secret set {id} {}`", l.name),
                    "rebound" => format!(
                        "set for {}, not for this place: the release does not get it until you set it again",
                        l.set_for.as_deref().unwrap_or("?")
                    ),
                    _ => format!(
                        "set for {} but not declared by this release: `autoapp secret remove {id} {}`",
                        l.set_for.as_deref().unwrap_or("?"),
                        l.name
                    ),
                };
                match (&l.summary, &l.binding) {
                    (Some(summary), Some(binding)) => say!("{}  {summary}\n    → {binding}\n    {state}", l.name),
                    _ => say!("{}\n    {state}", l.name),
                }
            }
            Ok(())
        }
        SecretAction::Remove { app, name } => {
            let id = app_id(&app)?;
            secrets::remove(&root, &vault(&root)?, &Caller::command_line(), &id, &name)?;
            say!("removed {name}: {id}'s requests go without it from the next call on");
            Ok(())
        }
    }
}

/// The value, read without echo from the terminal, or from standard input
/// when it is not one (one line; its line break dropped).
fn read_value(what: &str) -> Result<Value, Failure> {
    let text = if std::io::stdin().is_terminal() {
        tell!("Type or paste {what}, then Enter (nothing shows as you type):");
        rpassword::read_password().map_err(|e| format!("cannot read the key from the terminal: {e}"))?
    } else {
        let mut bytes = Vec::new();
        std::io::stdin()
            .take(crate::secrets::vault::VALUE_MAX as u64 + 3)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read the key from standard input: {e}"))?;
        let mut text =
            String::from_utf8(bytes).map_err(|_| "the key given on standard input is not text".to_string())?;
        if text.ends_with('\n') {
            text.pop();
            if text.ends_with('\r') {
                text.pop();
            }
        }
        text
    };
    let value = Value::new(text);
    crate::secrets::vault::check_value(value.expose()).map_err(|e| Failure { code: 2, message: format!("{e:#}") })?;
    Ok(value)
}
