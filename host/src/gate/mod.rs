//! The gate: the one door every call passes. It decides from the **channel**
//! (who is calling, set by the adapter that received the call), the route's
//! **effect** (from the release's contract) and whether the call runs in a
//! **preview**:
//!
//! - `read` runs for anybody;
//! - `write` and `external` on any channel but `user` ask the person, bound to
//!   `{requestId, appId, releaseId, route, argumentsHash}`; the answer is
//!   consumed once, an answer naming another release or arguments hash is a
//!   denial, and a question not answered within `approval_window` is a denial
//!   that says nobody declined it;
//! - with nobody attached (no tab of the app or the panel open) a question
//!   cannot be asked, so such a call is refused at once;
//! - a preview refuses `external` for everybody.
//!
//! Guest code runs only with a [`Pass`], which only [`Gate::guard`] makes.
//! The gate knows no transport: adapters construct a [`Caller`] and hand it in.

pub mod record;
pub mod standing;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use sha2::Digest as _;
use tokio::sync::{broadcast, oneshot};

use crate::manifest::{AppId, Effect};

/// Who is calling. Only adapters construct one (through [`Caller`]), from the
/// connection that received the call, never from anything the caller sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    /// The person: the command line, their own page.
    User,
    /// An AI agent inside the host.
    Ai,
    /// An MCP client, through `autoapp mcp` and the control connection.
    Mcp,
    /// A workflow the person set up.
    Workflow,
}

impl Channel {
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::User => "user",
            Channel::Ai => "ai",
            Channel::Mcp => "mcp",
            Channel::Workflow => "workflow",
        }
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A call's caller: the channel, and a label for the record and the question
/// shown to the person (never a permission). The fields are private: a caller
/// is made only by the constructor of the adapter that received the call.
#[derive(Debug, Clone)]
pub struct Caller {
    channel: Channel,
    label: String,
    /// The control connection the call came on (an engineer's): what a run
    /// is bound to. Set only by the control connection's adapter.
    connection: Option<Connection>,
}

/// A control connection of one launcher start: what a run, an engineer's
/// session and a plan's author are bound to. Connection numbers start at 1 in
/// every launcher, so the number alone never names one: the launcher's id (a
/// random value per start) goes with it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Connection {
    /// The id of the launcher start that numbered it.
    pub launcher: String,
    /// Its number in that launcher.
    pub number: u64,
}

/// The longest caller label kept; the rest is cut.
const MAX_LABEL: usize = 80;

fn clean_label(label: &str) -> String {
    label.chars().filter(|c| !c.is_control() && !crate::elsewhere::text::is_format(*c)).take(MAX_LABEL).collect()
}

impl Caller {
    /// The person at the command line.
    pub fn command_line() -> Caller {
        Caller { channel: Channel::User, label: "command line".into(), connection: None }
    }

    /// The person in their own page of the app or the panel.
    pub fn page() -> Caller {
        Caller { channel: Channel::User, label: "page".into(), connection: None }
    }

    /// The person in the panel (its lifecycle actions: activate, grant, …).
    pub fn panel() -> Caller {
        Caller { channel: Channel::User, label: "panel".into(), connection: None }
    }

    /// A client of the control connection (`autoapp mcp`): channel `mcp`.
    /// `client` is what the client calls itself, kept only as a label.
    pub fn control(client: &str) -> Caller {
        Caller { channel: Channel::Mcp, label: clean_label(client), connection: None }
    }

    /// A workflow run by the host: channel `workflow`.
    pub fn workflow(name: &str) -> Caller {
        Caller { channel: Channel::Workflow, label: clean_label(name), connection: None }
    }

    /// An AI agent running inside the host: channel `ai`.
    pub fn ai(name: &str) -> Caller {
        Caller { channel: Channel::Ai, label: clean_label(name), connection: None }
    }

    /// An engineer on control connection `connection` (of one launcher
    /// start): channel `ai`, bound to that connection.
    pub fn engineer(client: &str, connection: Connection) -> Caller {
        Caller { channel: Channel::Ai, label: clean_label(client), connection: Some(connection) }
    }

    /// The same caller working in plan `plan`'s run, on task `task`: the
    /// record's label says so (`<client> plan <id> task <n>`).
    pub fn in_run(&self, plan: u64, task: Option<u32>) -> Caller {
        let task = task.map(|t| format!(" task {t}")).unwrap_or_default();
        Caller { label: format!("{} plan {plan}{task}", self.label), ..self.clone() }
    }

    /// The control connection an engineer's call came on.
    pub fn connection(&self) -> Option<&Connection> {
        self.connection.as_ref()
    }

    pub fn channel(&self) -> Channel {
        self.channel
    }

    pub fn label(&self) -> &str {
        &self.label
    }
}

/// What the gate's rule says for a channel, an effect and a preview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    Allow,
    Ask,
    Refuse(String),
}

/// The gate's rule (DESIGN.md, "The gate").
pub fn rule(channel: Channel, effect: Effect, preview: bool) -> Rule {
    match (effect, channel) {
        (Effect::External, _) if preview => Rule::Refuse(
            "a preview runs on a copy of the data, not a copy of the world, so external routes are refused in it"
                .into(),
        ),
        (Effect::Read, _) | (_, Channel::User) => Rule::Allow,
        (Effect::Write | Effect::External, _) => Rule::Ask,
    }
}

/// How a call fared at the gate, as the record writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Ran without asking.
    Allowed,
    /// Ran because the person said yes to its question.
    Confirmed,
    /// The person said no, the answer did not match, or nobody answered in time.
    Denied,
    /// Refused by rule, without asking (nobody to ask, a preview, bad input).
    Refused,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Confirmed => "confirmed",
            Decision::Denied => "denied",
            Decision::Refused => "refused",
        }
    }
}

/// SHA-256 of the canonical JSON of `input`: object keys sorted, no spaces.
pub fn arguments_hash(input: &serde_json::Value) -> String {
    hash_of_canonical(&canonical_json(input))
}

/// SHA-256 of text that is already canonical JSON.
fn hash_of_canonical(text: &str) -> String {
    hex_of(&sha2::Sha256::digest(text.as_bytes()))
}

/// `bytes` (at most 32) as lowercase hex, made in one step: `hex::encode`
/// pushes a character at a time, a measurable part of a call's own cost
/// (docs/performance.md, P1).
fn hex_of(bytes: &[u8]) -> String {
    let mut buf = [0u8; 64];
    let out = &mut buf[..bytes.len() * 2];
    hex::encode_to_slice(bytes, out).expect("twice as long as the bytes");
    String::from_utf8_lossy(out).into_owned()
}

/// `input` as canonical JSON text (keys sorted at every depth; a number with
/// no fraction that fits 64 bits written as an integer: `1.0` and `1e2` are
/// `1` and `100`, which a schema's `integer` already took them for and a
/// guest's integer field can read).
pub fn canonical_json(v: &serde_json::Value) -> String {
    // Written straight into one buffer: keys and scalars as serde_json
    // writes them, none of them copied into a value of its own first.
    fn write(v: &serde_json::Value, out: &mut Vec<u8>) {
        match v {
            serde_json::Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push(b'{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    serde_json::to_writer(&mut *out, k.as_str()).expect("a string is written to memory");
                    out.push(b':');
                    write(&m[k], out);
                }
                out.push(b'}');
            }
            serde_json::Value::Array(a) => {
                out.push(b'[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write(x, out);
                }
                out.push(b']');
            }
            serde_json::Value::Number(n) if n.is_f64() => match whole(n.as_f64().unwrap_or(f64::NAN)) {
                Some(Ok(i)) => serde_json::to_writer(&mut *out, &i).expect("a number is written to memory"),
                Some(Err(u)) => serde_json::to_writer(&mut *out, &u).expect("a number is written to memory"),
                None => serde_json::to_writer(&mut *out, n).expect("a number is written to memory"),
            },
            other => serde_json::to_writer(&mut *out, other).expect("a scalar is written to memory"),
        }
    }
    /// `f` as an integer when it is one that 64 bits hold (signed, or
    /// else unsigned).
    fn whole(f: f64) -> Option<Result<i64, u64>> {
        const TWO_63: f64 = 9_223_372_036_854_775_808.0;
        if f.fract() != 0.0 || !f.is_finite() {
            return None;
        }
        if (-TWO_63..TWO_63).contains(&f) {
            Some(Ok(f as i64))
        } else if (0.0..2.0 * TWO_63).contains(&f) {
            Some(Err(f as u64))
        } else {
            None
        }
    }
    let mut out = Vec::with_capacity(128);
    write(v, &mut out);
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Who answered a call's question, as the record writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum AnsweredBy {
    /// The person: a click on the card (or their advance approval of a workflow).
    Person,
    /// The person's standing approval ("Work without asking").
    Standing,
    /// The run of the person's plan with this id ([`crate::plans`]).
    Run(u64),
    /// Nobody: no question was asked, or nobody answered it in time.
    Nobody,
}

impl fmt::Display for AnsweredBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnsweredBy::Person => f.write_str("person"),
            AnsweredBy::Standing => f.write_str("standing approval"),
            AnsweredBy::Run(plan) => write!(f, "run {plan}"),
            AnsweredBy::Nobody => f.write_str("nobody"),
        }
    }
}

/// One who answers yes in the person's stead, for a while and within limits
/// the person set: the standing approval ([`Standing`]) and a plan's run
/// ([`crate::plans::Plans`]). A stand-in never says no: what it does not
/// cover asks the person as usual.
pub trait StandIn: Send + Sync {
    /// Who answers `knock` yes, if this stand-in covers it now.
    fn answers(&self, knock: &Knock<'_>) -> Option<AnsweredBy>;
}

/// The person's standing approval as a stand-in: `<root>/standing.json`,
/// read at every question it could answer.
pub struct Standing(pub std::path::PathBuf);

impl StandIn for Standing {
    fn answers(&self, knock: &Knock<'_>) -> Option<AnsweredBy> {
        (standing_covers(knock) && standing::is_on(&self.0)).then_some(AnsweredBy::Standing)
    }
}

/// The engineer's tools the person's standing approval answers (DESIGN.md,
/// "The engineer"): one closed list. `preview_call` is covered through the
/// preview it calls (see [`standing_covers`]).
pub const STANDING_TOOLS: &[&str] =
    &["source_edit", "source_write", "source_delete", "candidate_build", "candidate_preview", "preview_stop"];

/// Whether the standing approval would answer the question of `knock`:
/// only on channel `ai`, and only for one of [`STANDING_TOOLS`] or a route of
/// a preview. Never `apps_create`, never a route of an active release, never
/// channels `mcp` or `workflow`.
pub fn standing_covers(knock: &Knock<'_>) -> bool {
    knock.caller.channel() == Channel::Ai
        && match knock.tool {
            true => STANDING_TOOLS.contains(&knock.route),
            false => knock.preview,
        }
}

/// A question waiting for the person.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Question {
    pub request_id: String,
    pub app_id: String,
    pub release_id: String,
    pub route: String,
    pub effect: Effect,
    pub arguments_hash: String,
    /// The arguments as the caller sent them, for the person to read.
    pub arguments: serde_json::Value,
    pub channel: Channel,
    pub caller: String,
    pub asked_at: String,
    pub expires_at: String,
    /// Seconds left when this copy was made.
    pub seconds_left: u64,
    /// What the call would change, as a unified diff (an engineer's edit),
    /// drawn as text.
    pub change: Option<String>,
    /// The person's keys the call's requests would carry, with where each
    /// goes (`weather → https://api.example, header Authorization`).
    pub keys: Vec<String>,
    /// Whether the standing approval would answer a question like this one
    /// (the card offers "Allow, and stop asking" only then).
    pub standing_covers: bool,
    #[serde(skip)]
    deadline: tokio::time::Instant,
}

/// What the gate tells listeners (the page's live updates).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum GateEvent {
    Asked { question: Box<Question> },
    Answered { request_id: String, app_id: String, outcome: String },
}

enum Reply {
    Yes,
    No,
    Mismatch(&'static str),
}

struct Waiting {
    question: Question,
    reply: oneshot::Sender<Reply>,
}

#[derive(Default)]
struct State {
    pending: HashMap<String, Waiting>,
    /// Open attachments per app; `None` is the panel, which sees every app.
    attached: HashMap<Option<AppId>, usize>,
}

/// A call at the door: everything the gate decides from.
pub struct Knock<'a> {
    pub caller: &'a Caller,
    pub app: &'a AppId,
    pub release: &'a str,
    pub route: &'a str,
    pub effect: Effect,
    pub preview: bool,
    /// The checked input.
    pub input: &'a serde_json::Value,
    /// For a workflow's run: the release the person approved that workflow
    /// for (`crate::workflows`), found by the runner in the person's
    /// approvals. Honored only on channel `workflow`, and only when it names
    /// the release this call runs.
    pub approved_for: Option<&'a str>,
    /// The call is an engineer's tool (`route` is the tool's name), not a
    /// route of the app. Set only by the engineer's adapter.
    pub tool: bool,
    /// What the call would change, for the person to read (a unified diff).
    pub change: Option<&'a str>,
    /// The person's keys an external call's requests would carry, each with
    /// where it goes (`crate::secrets`): the question names them.
    pub keys: &'a [String],
}

/// Leave to run guest code. Only [`Gate::guard`] and [`Gate::view`] make one.
#[derive(Debug)]
pub struct Pass {
    decision: Decision,
    answered_by: AnsweredBy,
    request_id: String,
    arguments_hash: String,
    /// The canonical JSON the hash is of: what the guest is given.
    input: String,
}

impl Pass {
    /// In an app's worker, the pass of a call its launcher's gate let
    /// through (`Gate::guard` or `Gate::view` there), carried over the
    /// channel only the launcher holds (`crate::worker::pool`) with the
    /// input the gate hashed. The worker decides nothing: it runs what its
    /// launcher passed, and its row says what the launcher's gate decided.
    pub(crate) fn carried(input: String) -> Pass {
        Pass {
            decision: Decision::Allowed,
            answered_by: AnsweredBy::Nobody,
            request_id: String::new(),
            arguments_hash: String::new(),
            input,
        }
    }

    pub fn decision(&self) -> Decision {
        self.decision
    }

    pub fn answered_by(&self) -> AnsweredBy {
        self.answered_by
    }

    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    pub fn arguments_hash(&self) -> &str {
        &self.arguments_hash
    }

    /// The input as it was hashed (canonical JSON): the text a route receives.
    pub fn input(&self) -> &str {
        &self.input
    }
}

/// A call the gate did not let through.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub decision: Decision,
    pub answered_by: AnsweredBy,
    pub reason: String,
    pub request_id: String,
    pub arguments_hash: String,
}

/// Why an answer was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("there is no question {0} waiting: it was answered already, it expired, or it never existed")]
    NoSuchQuestion(String),
    #[error("the answer names another {0} than the question; it counts as a denial and the call was refused")]
    Mismatch(&'static str),
}

/// What the gate answered a call: a decision and who answered, or a
/// refusal with its reason.
type Answer = Result<(Decision, AnsweredBy), (Decision, AnsweredBy, String)>;

/// The gate of one launcher process.
pub struct Gate {
    state: Mutex<State>,
    window: Duration,
    events: broadcast::Sender<GateEvent>,
    /// Who may answer yes in the person's stead, asked in order.
    stand_ins: Vec<Arc<dyn StandIn>>,
}

impl Gate {
    /// A gate with no stand-in: every question goes to the person.
    pub fn new(window: Duration) -> Arc<Gate> {
        Gate::with_stand_ins(window, Vec::new())
    }

    /// A gate that reads the person's standing approval from `standing`
    /// (`<root>/standing.json`) at every question it could answer.
    pub fn with_standing(window: Duration, standing: Option<std::path::PathBuf>) -> Arc<Gate> {
        let stand_ins: Vec<Arc<dyn StandIn>> =
            standing.into_iter().map(|f| Arc::new(Standing(f)) as Arc<dyn StandIn>).collect();
        Gate::with_stand_ins(window, stand_ins)
    }

    /// A gate whose stand-ins (asked in order) may answer yes for the person.
    pub fn with_stand_ins(window: Duration, stand_ins: Vec<Arc<dyn StandIn>>) -> Arc<Gate> {
        let (events, _) = broadcast::channel(256);
        Arc::new(Gate { state: Mutex::default(), window, events, stand_ins })
    }

    /// The approval window, for messages.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Decides a call; waits for the person when the rule says ask.
    pub async fn guard(&self, knock: Knock<'_>) -> Result<Pass, Refusal> {
        let request_id = new_request_id();
        let canonical = canonical_json(knock.input);
        let arguments_hash = hash_of_canonical(&canonical);
        let answer = match self.answered_at_the_door(&knock) {
            Some(answer) => answer,
            None => self.ask(&knock, &request_id, &arguments_hash).await,
        };
        match answer {
            Ok((decision, answered_by)) => {
                Ok(Pass { decision, answered_by, request_id, arguments_hash, input: canonical })
            }
            Err((decision, answered_by, reason)) => {
                Err(Refusal { decision, answered_by, reason, request_id, arguments_hash })
            }
        }
    }

    /// The answer the rule gives without asking the person, if it gives one:
    /// allowed, refused, a workflow the person approved for this release
    /// ahead of time, or a stand-in's yes. `None`: the person is asked.
    fn answered_at_the_door(&self, knock: &Knock<'_>) -> Option<Answer> {
        match rule(knock.caller.channel(), knock.effect, knock.preview) {
            Rule::Allow => {
                // Nobody is asked; a call the person made is the person's own.
                let answered_by =
                    if knock.caller.channel() == Channel::User { AnsweredBy::Person } else { AnsweredBy::Nobody };
                Some(Ok((Decision::Allowed, answered_by)))
            }
            Rule::Refuse(why) => Some(Err((Decision::Refused, AnsweredBy::Nobody, why))),
            Rule::Ask if knock.caller.channel() == Channel::Workflow && knock.approved_for == Some(knock.release) => {
                // The person said yes to this workflow of this release ahead
                // of time; the runner checked the route and the input hash.
                Some(Ok((Decision::Confirmed, AnsweredBy::Person)))
            }
            Rule::Ask => {
                // A stand-in the person set answers yes, here, before any
                // card: nothing waits, and the record says who answered.
                let by = self.stand_ins.iter().find_map(|s| s.answers(knock))?;
                tracing::info!(app = %knock.app, "the {by} approved {} for {}", knock.route, knock.app);
                Some(Ok((Decision::Confirmed, by)))
            }
        }
    }

    /// Asks the person (a question to every page of the app and the panel)
    /// and waits for the answer, up to the approval window. Refused at once
    /// when no page could be asked.
    async fn ask(&self, knock: &Knock<'_>, request_id: &str, arguments_hash: &str) -> Answer {
        let deadline = tokio::time::Instant::now() + self.window;
        let question = self.question(knock, request_id, arguments_hash, deadline);
        let (tx, rx) = oneshot::channel();
        {
            let mut st = self.state.lock().expect("gate state");
            let attached = st.attached.get(&None).copied().unwrap_or(0) > 0
                || st.attached.get(&Some(knock.app.clone())).copied().unwrap_or(0) > 0;
            if !attached {
                return Err((
                    Decision::Refused,
                    AnsweredBy::Nobody,
                    format!(
                        "route `{}` is a {} and the caller is not the person, who must approve it, but nobody could be asked: no page of {} or of the panel is open; open one and try again",
                        knock.route, knock.effect, knock.app
                    ),
                ));
            }
            st.pending.insert(request_id.to_string(), Waiting { question: question.clone(), reply: tx });
        }
        let _ = self.events.send(GateEvent::Asked { question: Box::new(question) });
        // A call that stops waiting (its caller went away) takes its question along.
        let cleanup = PendingGuard { gate: self, request_id };
        let reply = tokio::select! {
            reply = tokio::time::timeout_at(deadline, rx) => reply,
            // Its adapter says its caller went away: withdrawn (as `cleanup`
            // goes), and refused.
            () = caller_gone() => {
                return Err((
                    Decision::Refused,
                    AnsweredBy::Nobody,
                    "its caller went away before the person answered; the question was withdrawn".into(),
                ));
            }
        };
        drop(cleanup);
        let minutes = self.window.as_secs().div_ceil(60);
        match reply {
            Ok(Ok(Reply::Yes)) => Ok((Decision::Confirmed, AnsweredBy::Person)),
            Ok(Ok(Reply::No)) => Err((Decision::Denied, AnsweredBy::Person, "the person declined this call".into())),
            Ok(Ok(Reply::Mismatch(what))) => Err((
                Decision::Denied,
                AnsweredBy::Person,
                format!("the answer named another {what} than this call, which counts as a denial; ask again"),
            )),
            Ok(Err(_)) | Err(_) => {
                self.forget(request_id, "expired");
                Err((
                    Decision::Denied,
                    AnsweredBy::Nobody,
                    format!(
                        "not answered within {minutes} minute{}; nobody declined it",
                        if minutes == 1 { "" } else { "s" }
                    ),
                ))
            }
        }
    }

    /// The question the person reads for `knock`, open until `deadline`.
    fn question(
        &self,
        knock: &Knock<'_>,
        request_id: &str,
        arguments_hash: &str,
        deadline: tokio::time::Instant,
    ) -> Question {
        let wall = SystemTime::now();
        Question {
            request_id: request_id.to_string(),
            app_id: knock.app.to_string(),
            release_id: knock.release.to_string(),
            route: knock.route.to_string(),
            effect: knock.effect,
            arguments_hash: arguments_hash.to_string(),
            arguments: knock.input.clone(),
            channel: knock.caller.channel(),
            caller: knock.caller.label().to_string(),
            asked_at: rfc3339(wall),
            expires_at: rfc3339(wall + self.window),
            seconds_left: self.window.as_secs(),
            change: knock.change.map(str::to_string),
            keys: knock.keys.to_vec(),
            standing_covers: standing_covers(knock),
            deadline,
        }
    }

    /// A pass for rendering a page: a render runs as a read, on any channel.
    pub(crate) fn view(&self) -> Pass {
        Pass {
            decision: Decision::Allowed,
            answered_by: AnsweredBy::Nobody,
            request_id: new_request_id(),
            arguments_hash: String::new(),
            input: String::new(),
        }
    }

    /// The questions waiting, oldest first.
    pub fn pending(&self) -> Vec<Question> {
        let st = self.state.lock().expect("gate state");
        let now = tokio::time::Instant::now();
        let mut qs: Vec<Question> = st
            .pending
            .values()
            .map(|w| {
                let mut q = w.question.clone();
                q.seconds_left = q.deadline.saturating_duration_since(now).as_secs();
                q
            })
            .collect();
        qs.sort_by(|a, b| a.asked_at.cmp(&b.asked_at).then(a.request_id.cmp(&b.request_id)));
        qs
    }

    /// The person's answer to question `request_id`. It must name the
    /// question's release and arguments hash; any answer consumes the question.
    pub fn answer(
        &self,
        request_id: &str,
        release_id: &str,
        arguments_hash: &str,
        yes: bool,
    ) -> Result<(), AnswerError> {
        let waiting = {
            let mut st = self.state.lock().expect("gate state");
            st.pending.remove(request_id).ok_or_else(|| AnswerError::NoSuchQuestion(request_id.to_string()))?
        };
        let q = &waiting.question;
        let (reply, outcome, result) = if q.release_id != release_id {
            (Reply::Mismatch("release"), "mismatch", Err(AnswerError::Mismatch("release")))
        } else if q.arguments_hash != arguments_hash {
            (Reply::Mismatch("arguments"), "mismatch", Err(AnswerError::Mismatch("arguments")))
        } else if yes {
            (Reply::Yes, "approved", Ok(()))
        } else {
            (Reply::No, "declined", Ok(()))
        };
        let _ = self.events.send(GateEvent::Answered {
            request_id: q.request_id.clone(),
            app_id: q.app_id.clone(),
            outcome: outcome.into(),
        });
        let _ = waiting.reply.send(reply);
        result
    }

    /// Marks `app` (or, with `None`, the panel, which covers every app) as
    /// attached while the returned value lives.
    pub fn attach(self: &Arc<Self>, app: Option<AppId>) -> Attachment {
        *self.state.lock().expect("gate state").attached.entry(app.clone()).or_insert(0) += 1;
        Attachment { gate: self.clone(), app }
    }

    /// Whether a question about `app` could be asked now.
    /// How many pages (tabs of an app, the panel) are open and able to answer.
    pub fn pages(&self) -> usize {
        self.state.lock().expect("gate state").attached.values().sum()
    }

    pub fn is_attached(&self, app: &AppId) -> bool {
        let st = self.state.lock().expect("gate state");
        st.attached.get(&None).copied().unwrap_or(0) > 0
            || st.attached.get(&Some(app.clone())).copied().unwrap_or(0) > 0
    }

    /// Live updates: questions asked and answered.
    pub fn subscribe(&self) -> broadcast::Receiver<GateEvent> {
        self.events.subscribe()
    }

    fn forget(&self, request_id: &str, outcome: &str) {
        let removed = self.state.lock().expect("gate state").pending.remove(request_id);
        if let Some(w) = removed {
            let _ = self.events.send(GateEvent::Answered {
                request_id: request_id.to_string(),
                app_id: w.question.app_id,
                outcome: outcome.into(),
            });
        }
    }
}

tokio::task_local! {
    /// Set by an adapter whose caller may go away while its call waits for
    /// the person (the control connection's `invoke`): once it turns true, a
    /// question the call waits for is withdrawn and the call refused. What
    /// runs past the gate is not affected: it runs to its end.
    pub static CALLER_GONE: tokio::sync::watch::Receiver<bool>;
}

/// Resolves once the caller of this task went away ([`CALLER_GONE`]); never
/// where no adapter said how to know.
async fn caller_gone() {
    if let Ok(mut gone) = CALLER_GONE.try_with(|gone| gone.clone())
        && gone.wait_for(|g| *g).await.is_ok()
    {
        return;
    }
    std::future::pending().await
}

struct PendingGuard<'a> {
    gate: &'a Gate,
    request_id: &'a str,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.gate.forget(self.request_id, "withdrawn");
    }
}

/// An open page of an app (or of the panel) that questions can be shown in.
pub struct Attachment {
    gate: Arc<Gate>,
    app: Option<AppId>,
}

impl Drop for Attachment {
    fn drop(&mut self) {
        let mut st = self.gate.state.lock().expect("gate state");
        if let Some(n) = st.attached.get_mut(&self.app) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                st.attached.remove(&self.app);
            }
        }
    }
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// A fresh request id: 128 bits nobody can predict. SHA-256 of a secret
/// drawn once from the system's random source and a counter, so a call pays
/// no system call for it.
fn new_request_id() -> String {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SECRET: OnceLock<[u8; 32]> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let secret = SECRET.get_or_init(|| {
        let mut b = [0u8; 32];
        getrandom::fill(&mut b).expect("the system's random source works");
        b
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut h = sha2::Sha256::new();
    h.update(secret);
    h.update(n.to_le_bytes());
    hex_of(&h.finalize()[..16])
}

/// For tests of the gate's timing: how long until `q` expires.
pub fn time_left(q: &Question) -> Duration {
    q.deadline.saturating_duration_since(tokio::time::Instant::now())
}

#[cfg(test)]
mod tests;
