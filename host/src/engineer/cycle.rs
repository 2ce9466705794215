//! `candidate_cycle`: the change cycle in one tool call — the edit, the
//! build, a preview of what was built, and (when asked) a `read` route called
//! in the preview. Each step is its own question to the person (or its
//! stand-in), asked as the tool it is (`source_edit`, `candidate_build`,
//! `candidate_preview`) and bound to its own arguments, which say which step
//! it is and of which cycle: one yes never covers the next step. A step that
//! fails, or is declined, stops the cycle; a failed build answers with the
//! compiler's messages.

use serde_json::{Value, json};

use super::inputs::{self, parse, schema};
use super::{Answer, Engineer, Progress, Spec, tools};
use crate::error::{ErrorKind, kinded};
use crate::gate::Caller;
use crate::manifest::{AppId, Effect};

/// The tool's description and input.
pub fn spec() -> Spec {
    Spec {
        name: "candidate_cycle",
        effect: Some(Effect::Write),
        description: "One change cycle in one call: replace one span of a file (as source_edit), build a candidate, start its preview, and, when `check` names a read route, call it in the preview. Each step asks the person (or is answered by your run or the standing approval) on its own; a failed step stops the cycle, and a failed build answers with the compiler's messages.",
        input: schema::<inputs::CandidateCycle>(),
    }
}

fn spec_of(name: &str) -> &'static Spec {
    tools().iter().find(|s| s.name == name).expect("a tool of the list")
}

/// Which step of which cycle, for the step's question and record.
fn step(args: &Value, cycle: &str, n: u32, what: &str) -> Value {
    let mut a = args.clone();
    if let Value::Object(m) = &mut a {
        m.insert("step".into(), Value::String(format!("{n} of 3: {what} (candidate_cycle {cycle})")));
    }
    a
}

impl Engineer {
    pub(super) async fn candidate_cycle(
        &self,
        caller: &Caller,
        app: &AppId,
        args: &Value,
        progress: &Progress,
        gone: &crate::build::Stop,
    ) -> anyhow::Result<Answer> {
        let cycle: String = crate::secret::random_hex().chars().take(12).collect();
        let input = parse::<inputs::CandidateCycle>("candidate_cycle", args)?;
        let check = input.check;
        // 1. The edit: its question shows the diff.
        let edit = json!({ "app": app, "path": input.path, "old": input.old, "new": input.new });
        let edit_args = step(&edit, &cycle, 1, "edit");
        let edited = self.source_change(caller, spec_of("source_edit"), app, &edit_args, progress, gone).await;
        let edited = edited.map_err(|e| stopped(e, "step 1 of 3 (the edit)"))?;
        // 2. The build.
        let build_args = step(&json!({ "app": app }), &cycle, 2, "build");
        let built = self.candidate_build(caller, spec_of("candidate_build"), app, &build_args, progress, gone).await;
        let built = built.map_err(|e| stopped(e, "step 2 of 3 (the build)"))?;
        let release = built["release"].as_str().unwrap_or_default().to_string();
        // 3. The preview of what was built.
        let preview_args = step(&json!({ "app": app, "release": release }), &cycle, 3, "preview");
        let previewed =
            self.candidate_preview(caller, spec_of("candidate_preview"), app, &preview_args, progress).await;
        previewed.map_err(|e| stopped(e, "step 3 of 3 (the preview)"))?;
        // Then the check, a read in the preview: it asks nobody.
        let checked = match &check {
            None => Value::Null,
            Some(route) => {
                // Only a read: a write or external route is not a check.
                let manifest = crate::release::manifest(&self.apps.root().app(app), &release)?;
                let effect = manifest.routes.iter().find(|r| &r.name == route).map(|r| r.effect);
                if effect != Some(Effect::Read) {
                    let what = effect.map(|e| format!("a {e} route")).unwrap_or_else(|| "not a route of it".into());
                    return Err(kinded(
                        ErrorKind::InvalidInput,
                        format!(
                            "the cycle stopped at the check: `{route}` is {what} of release {}; `check` names a read route (the preview runs, and preview_call calls any route)",
                            crate::release::short(&release)
                        ),
                    ));
                }
                let call = json!({ "app": app, "route": route, "release": release });
                self.preview_call(caller, app, &call).await.map_err(|e| stopped(e, "the check"))?
            }
        };
        let said = match &check {
            Some(route) => format!("; `{route}` answered in the preview"),
            None => String::new(),
        };
        Ok(json!({
            "message": format!("edited, built release {} and started its preview{said}", crate::release::short(&release)),
            "diff": edited["diff"], "release": release, "check": checked,
        }))
    }
}

/// A step's error, saying the cycle stopped there; its kind kept.
fn stopped(e: anyhow::Error, at: &str) -> anyhow::Error {
    let kind = crate::error::kind_of(&e);
    kinded(kind, format!("the cycle stopped at {at}: {e:#}"))
}
