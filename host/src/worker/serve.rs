//! A launcher's worker, once confined (`worker::main` with `serve`): reads
//! whose it is, then the calls its launcher's gate passed, one JSON line
//! each on its standard input, runs each as it comes (many at once), and
//! answers each on its standard output with the call's id. An inner worker
//! of an app the launcher serves also serves the app's own server, on the
//! socket the launcher gave it (`server::front`): its pages and their
//! calls run here, with no hop through the launcher; what the launcher
//! keeps (launch tokens, questions, events) it asks over the same channel
//! ([`Link`]). When it is retired (or its standard input ends: the
//! launcher ended), it takes no new connection or call, finishes what it
//! has, and ends.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};

use super::Held;
pub use super::pool::Reply;
use super::pool::{Ask, Forwarded, Said, Start, Told, What};
use crate::apps::{Ahead, Apps, CallError, ErrorKind};
use crate::caps::network::relay::{self, Failure, Outgoing, Piece, Relay, Relayed};
use crate::root::Root;

/// The most a line from the launcher may be (a call's input and keys).
const MAX_ASK: u64 = 64 << 20;

/// Says on its standard output that it could not confine itself.
pub(super) fn unconfinable(why: String) {
    tell_blocking(&Told { id: 0, said: Said::Unconfinable(why) });
}

fn tell_blocking(told: &Told) {
    use std::io::Write as _;
    if let Ok(mut bytes) = serde_json::to_vec(told) {
        bytes.push(b'\n');
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(&bytes).and_then(|_| out.flush());
    }
}

/// The app's own server as its worker serves it (`server::front`, given
/// by the command line: the server's room is above the worker's).
pub type Front = fn(Served) -> crate::apps::BoxFuture<()>;

/// What a worker gives its app's server.
pub struct Served {
    pub listener: tokio::net::TcpListener,
    pub port: u16,
    pub apps: Arc<Apps>,
    pub app: crate::manifest::AppId,
    pub link: Arc<Link>,
    /// Turns true when it is retired (or its launcher ended): it takes no
    /// new connection and ends those it has once their requests are answered.
    pub stop: tokio::sync::watch::Receiver<bool>,
}

/// Serves its launcher until it is retired or its standard input ends.
pub(super) fn main(held: Held, front: Front) -> i32 {
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt.block_on(serve(held, front)),
        Err(e) => {
            tell_blocking(&Told { id: 0, said: Said::Failed(format!("the worker could not start ({e})")) });
            1
        }
    }
}

/// The socket its launcher gave it (descriptor 3), checked: a TCP socket
/// listening on loopback at `port`.
fn given_listener(port: u16) -> Result<std::net::TcpListener, String> {
    use std::os::fd::FromRawFd as _;
    // SAFETY: descriptor 3 is the socket its launcher placed there before
    // it was started (`pool::SITE_FD`), taken once, here; it is checked
    // before it is used.
    #[allow(unsafe_code)]
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(super::pool::SITE_FD) };
    let listening = rustix::net::sockopt::socket_acceptconn(&fd).unwrap_or(false);
    let listener = std::net::TcpListener::from(fd);
    let at = listener.local_addr().map_err(|e| format!("its socket is not one ({e})"))?;
    if !listening || at != std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port)) {
        return Err("its socket is not its app's server's".into());
    }
    listener.set_nonblocking(true).map_err(|e| format!("its socket cannot be used ({e})"))?;
    Ok(listener)
}

async fn serve(held: Held, front: Front) -> i32 {
    // Its channel's pipes, read and written as the runtime's own (tokio's
    // standard streams hand every read and write to a blocking thread).
    use std::os::fd::AsFd as _;
    let pipes = (
        std::io::stdin().as_fd().try_clone_to_owned().and_then(tokio::net::unix::pipe::Receiver::from_owned_fd),
        std::io::stdout().as_fd().try_clone_to_owned().and_then(tokio::net::unix::pipe::Sender::from_owned_fd),
    );
    let (Ok(input), Ok(mut stdout)) = pipes else { return failed("the worker's channel is not its launcher's pipes") };
    let mut input = tokio::io::BufReader::new(input);
    let start: Start = match read(&mut input).await {
        Some(Ok(line)) => match serde_json::from_slice(&line) {
            Ok(s) => s,
            Err(_) => return failed("the worker's start is malformed"),
        },
        _ => return failed("the worker was given no start"),
    };
    let Ok(root) = Root::open(&start.root) else { return failed("the worker's start names no root") };
    let listener = match &start.site {
        Some(site) => match given_listener(site.port)
            .and_then(|l| tokio::net::TcpListener::from_std(l).map_err(|e| format!("its socket cannot be used ({e})")))
        {
            Ok(l) => Some(l),
            Err(why) => return failed(&format!("the worker cannot serve its app: {why}")),
        },
        None => None,
    };
    // Confined with Landlock and the filter, it contains its programs the
    // same way (what `confine::probe` would have found).
    let containment = start.containment.unwrap_or_else(|| super::containment_of(held, &start.config));
    let ahead = Ahead { containment };
    let apps = match Apps::confined(root, &start.config, ahead) {
        Ok(apps) => Arc::new(apps),
        Err(e) => return failed(&format!("{e:#}")),
    };
    let app = start.app;
    let (out, mut to_write) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let (end_writer, mut ending) = tokio::sync::oneshot::channel::<()>();
    let writer = tokio::spawn(async move {
        // The answers ready meanwhile go in one write; at its end, what is
        // queued still goes.
        let (mut queued, mut batch, mut last) = (Vec::new(), Vec::new(), false);
        while !last {
            let got = tokio::select! {
                n = to_write.recv_many(&mut queued, 256) => n > 0,
                _ = &mut ending => false,
            };
            if !got {
                while let Ok(line) = to_write.try_recv() {
                    queued.push(line);
                }
                last = true;
            }
            batch.clear();
            for line in queued.drain(..) {
                batch.extend_from_slice(&line);
            }
            if stdout.write_all(&batch).await.is_err() {
                break;
            }
        }
    });
    let port = start.site.as_ref().map_or(0, |s| s.port);
    let link = Arc::new(Link::new(out.clone(), start.site.map(|s| s.sessions).unwrap_or_default()));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    // Each call holds a clone; when the last goes, its calls are done.
    let (running, mut all_done) = tokio::sync::mpsc::channel::<()>(1);
    // Ready before its server takes a connection: the launcher's first
    // line from it is this one.
    link.say(0, Said::Ready { held: held.into(), in_place: crate::runtime::resets_in_place() });
    // It serves its app's server only once its launcher put it in place
    // (`Serve`): one retired as it was put in place (its app changed while
    // it started) never takes a connection.
    let (serve, in_place) = tokio::sync::oneshot::channel::<()>();
    // What the compiled cache lost (emptied while the launcher ran) is
    // compiled by the launcher: this process may only read the cache.
    apps.compile_through(link.clone());
    let server = listener.map(|listener| {
        apps.note_through(link.clone());
        let served =
            Served { listener, port, apps: apps.clone(), app: app.clone(), link: link.clone(), stop: stopped.clone() };
        let mut retired = stopped.clone();
        tokio::spawn(async move {
            tokio::select! {
                placed = in_place => if placed.is_err() { return },
                _ = retired.wait_for(|s| *s) => return,
            }
            front(served).await
        })
    });
    // Its channel, read until its end: the launcher's calls, and its
    // answers to what this worker asked.
    let reading = {
        let (apps, app, link) = (apps.clone(), app.clone(), link.clone());
        tokio::spawn(async move {
            let mut running = Some(running);
            let mut serve = Some(serve);
            while let Some(Ok(line)) = read(&mut input).await {
                // It holds the keys: cleared when dropped.
                let line = zeroize::Zeroizing::new(line);
                let Ok(Ask { id, what }) = serde_json::from_slice::<Ask>(&line) else {
                    // The launcher wrote it: a line it cannot read ends the worker.
                    break;
                };
                drop(line);
                let what = match what {
                    What::Reply(reply) => {
                        link.replied(id, reply);
                        continue;
                    }
                    What::Sessions(sessions) => {
                        link.set_sessions(sessions);
                        continue;
                    }
                    What::Serve(sessions) => {
                        link.set_sessions(sessions);
                        if let Some(serve) = serve.take() {
                            let _ = serve.send(());
                        }
                        continue;
                    }
                    What::StopServing => {
                        // Another worker takes the socket: no new
                        // connection here, its tabs' event streams end.
                        link.end_forwards();
                        let _ = stop.send(true);
                        continue;
                    }
                    What::Retire => {
                        // No new call; the ones it has finish.
                        running = None;
                        link.end_forwards();
                        let _ = stop.send(true);
                        continue;
                    }
                    what => what,
                };
                let Some(held) = running.clone() else { continue };
                let (apps, app, link) = (apps.clone(), app.clone(), link.clone());
                tokio::spawn(async move {
                    let _held = held;
                    let answer = run(&apps, &app, id, &link, what).await;
                    link.say(id, Said::Answer(answer));
                });
            }
            // Its launcher ended (or wrote what it cannot read): nothing it
            // asked will be answered.
            link.close();
            let _ = stop.send(true);
        })
    };
    // Retired, or its launcher ended: its server ends once its requests
    // are answered, and its calls finish.
    let mut stopped_too = stopped.clone();
    let _ = stopped_too.wait_for(|s| *s).await;
    if let Some(server) = server {
        let _ = server.await;
    }
    while all_done.recv().await.is_some() {}
    reading.abort();
    drop(link);
    drop(out);
    let _ = end_writer.send(());
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), writer).await;
    // Its last rows (reads are batched) and log lines, written before it
    // ends: the launcher waits for its end on a clean stop.
    apps.flush_record();
    crate::applog::flush();
    drop(apps);
    0
}

/// Runs one thing its launcher asked (`id`, the launcher's).
async fn run(
    apps: &Apps,
    app: &crate::manifest::AppId,
    id: u64,
    link: &Arc<Link>,
    what: What,
) -> Result<serde_json::Value, CallError> {
    match what {
        What::Call { call } => {
            if call.app != *app {
                return Err(CallError::new(ErrorKind::Internal, "the call is of another app's worker"));
            }
            apps.run_carried(*call, Some(Arc::new(Sends { link: link.clone(), call: id }))).await
        }
        What::Prepare { release } => apps.prepare_carried(app, &release).await.map(|_| serde_json::Value::Null),
        What::Reply(_) | What::Sessions(_) | What::Serve(_) | What::StopServing | What::Retire => {
            Err(CallError::new(ErrorKind::Internal, "not something a worker runs"))
        }
    }
}

/// A worker's side of its channel, for its app's server: what it asks its
/// launcher (a launch token redeemed, a request it answers, a first write
/// noted), and the sessions of the app's tabs.
pub struct Link {
    out: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
    next: AtomicU64,
    /// What waits for the launcher's answer, by id: whether it is a
    /// forwarded request whose answer's body comes now, and where its
    /// answer goes.
    waiting: Mutex<HashMap<u64, (bool, tokio::sync::mpsc::UnboundedSender<Reply>)>>,
    sessions: Mutex<HashSet<String>>,
    used: Mutex<Option<Instant>>,
    closed: AtomicBool,
    /// Retired: an event stream's answer that comes now ends at once.
    retired: AtomicBool,
    /// A `changed` notice is on its way.
    changing: AtomicBool,
    /// Its ask for compiled code under way.
    compiling: tokio::sync::Mutex<()>,
}

impl Link {
    fn new(out: tokio::sync::mpsc::UnboundedSender<Vec<u8>>, sessions: Vec<String>) -> Link {
        Link {
            out,
            next: AtomicU64::new(1),
            waiting: Mutex::default(),
            sessions: Mutex::new(sessions.into_iter().collect()),
            used: Mutex::default(),
            closed: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            changing: AtomicBool::new(false),
            compiling: tokio::sync::Mutex::new(()),
        }
    }

    fn say(&self, id: u64, said: Said) {
        if let Ok(mut bytes) = serde_json::to_vec(&Told { id, said }) {
            bytes.push(b'\n');
            let _ = self.out.send(bytes);
        }
    }

    /// Asks the launcher: its answers come on the receiver, which ends
    /// when nothing more will come.
    fn ask(&self, said: Said) -> (u64, tokio::sync::mpsc::UnboundedReceiver<Reply>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        if !self.closed.load(Ordering::Acquire) {
            self.waiting.lock().expect("waiting").insert(id, (false, tx));
            self.say(id, said);
        }
        (id, rx)
    }

    fn replied(&self, id: u64, reply: Reply) {
        let mut last = matches!(
            reply,
            Reply::Redeemed(_) | Reply::End | Reply::Noted | Reply::Compiled(_) | Reply::NotSent(_) | Reply::Broken(_)
        );
        // A stream: an answer whose length is not known (a tab's events).
        let stream = match &reply {
            Reply::Head { headers, .. } => !headers.iter().any(|(k, _)| k == "content-length"),
            _ => false,
        };
        let mut waiting = self.waiting.lock().expect("waiting");
        if let Some((streaming, tx)) = waiting.get_mut(&id) {
            *streaming |= stream;
            let _ = tx.send(reply);
            if stream && self.retired.load(Ordering::Acquire) {
                // Retired meanwhile: it ends now, and the tab connects again.
                last = true;
                self.say(id, Said::Cancel);
            }
            if last {
                waiting.remove(&id);
            }
        }
    }

    /// Sessions the launcher opened (none is ever taken back while it runs).
    fn set_sessions(&self, sessions: Vec<String>) {
        self.sessions.lock().expect("sessions").extend(sessions);
    }

    /// Ends the forwarded requests whose answers' bodies come now (a tab's
    /// events: they end, and the tab connects again, to the next worker):
    /// retired. What waits for its answer's head still gets it.
    fn end_forwards(&self) {
        self.retired.store(true, Ordering::Release);
        let mut ended = Vec::new();
        self.waiting.lock().expect("waiting").retain(|id, (streaming, _)| {
            if *streaming {
                ended.push(*id);
            }
            !*streaming
        });
        for id in ended {
            self.say(id, Said::Cancel);
        }
    }

    /// Its launcher is gone: nothing it waits for will come.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.waiting.lock().expect("waiting").clear();
    }

    /// Whether `session` is one of the app's tabs'.
    pub fn has_session(&self, session: &str) -> bool {
        self.sessions.lock().expect("sessions").iter().any(|s| crate::secret::same(s, session))
    }

    /// Redeems a launch token through the launcher: the session it opens.
    pub async fn redeem(&self, token: &str) -> Option<String> {
        let (_, mut answer) = self.ask(Said::Redeem(token.to_string()));
        match answer.recv().await {
            Some(Reply::Redeemed(Some(session))) => {
                self.sessions.lock().expect("sessions").insert(session.clone());
                Some(session)
            }
            _ => None,
        }
    }

    /// Sends a request on to the launcher: its id (to cancel it) and its
    /// answer's head, pieces and end as they come.
    pub fn forward(
        &self,
        method: String,
        uri: String,
        headers: Vec<(String, String)>,
        body: &[u8],
    ) -> (u64, tokio::sync::mpsc::UnboundedReceiver<Reply>) {
        use base64::Engine as _;
        let body = base64::engine::general_purpose::STANDARD.encode(body);
        self.ask(Said::Forward(Forwarded { method, uri, headers, body }))
    }

    /// The client of forwarded request `id` went away.
    pub fn cancel(&self, id: u64) {
        if self.waiting.lock().expect("waiting").remove(&id).is_some() {
            self.say(id, Said::Cancel);
        }
    }

    /// A write changed the app's data: said at most once per 50 ms (the
    /// pages refresh once for a burst of writes).
    pub fn changed(self: &Arc<Self>) {
        if self.changing.swap(true, Ordering::AcqRel) {
            return;
        }
        let link = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            link.changing.store(false, Ordering::Release);
            link.say(0, Said::Changed);
        });
    }

    /// Its server was used: said at most once a second (not idle).
    pub fn used(&self) {
        let mut used = self.used.lock().expect("used");
        if used.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(1)) {
            *used = Some(Instant::now());
            self.say(0, Said::Used);
        }
    }
}

impl crate::apps::Noter for Link {
    fn note(&self, _app: &crate::manifest::AppId, release: &str) -> crate::apps::BoxFuture<()> {
        let (_, mut answer) = self.ask(Said::Note(release.to_string()));
        Box::pin(async move {
            let _ = answer.recv().await;
        })
    }
}

impl crate::apps::Compiler for Link {
    fn compile(
        self: Arc<Self>,
        app: &crate::manifest::AppId,
        release: &str,
    ) -> crate::apps::BoxFuture<Result<(), CallError>> {
        let (link, release, app) = (self, release.to_string(), app.clone());
        Box::pin(async move {
            // One ask at a time (its launcher refuses a second meanwhile).
            let _one = link.compiling.lock().await;
            let (_, mut answer) = link.ask(Said::Compile(release));
            match answer.recv().await {
                Some(Reply::Compiled(None)) => Ok(()),
                Some(Reply::Compiled(Some(why))) => Err(CallError::new(ErrorKind::Internal, why)),
                _ => Err(CallError::new(
                    ErrorKind::Internal,
                    format!(
                        "the compiled code of {app}'s release is not in the cache, and its launcher did not compile it; try again"
                    ),
                )),
            }
        })
    }
}

/// A call's requests, handed to its launcher over the channel: the launcher
/// sends each (the worker has no socket, and no key to add), and its answer
/// comes back a piece at a time.
struct Sends {
    link: Arc<Link>,
    /// The launcher's id of the call.
    call: u64,
}

impl Relay for Sends {
    fn send(&self, request: Outgoing) -> crate::apps::BoxFuture<Result<Relayed, Failure>> {
        let (id, mut answers) = self.link.ask(Said::Send { call: self.call, request });
        let link = self.link.clone();
        Box::pin(async move {
            let head = match answers.recv().await {
                Some(Reply::Sent(received)) => received,
                Some(Reply::NotSent(failure)) => return Err(failure),
                _ => return Err(Failure::Internal(Some("its launcher did not send the request".into()))),
            };
            let (to_body, pieces) = tokio::sync::mpsc::unbounded_channel();
            tokio::spawn(async move {
                loop {
                    let piece = match answers.recv().await {
                        Some(Reply::Chunk(b64)) => match relay::bytes_in(&b64) {
                            Some(bytes) => Piece::Data(bytes),
                            None => Piece::Failed(Failure::Protocol),
                        },
                        Some(Reply::Trailers(trailers)) => Piece::Trailers(trailers),
                        Some(Reply::Broken(failure)) => Piece::Failed(failure),
                        Some(Reply::End) => break,
                        Some(_) => Piece::Failed(Failure::Protocol),
                        // Its launcher went away, or the body was dropped.
                        None => Piece::Failed(Failure::Incomplete),
                    };
                    let last = !matches!(piece, Piece::Data(_));
                    if to_body.send(piece).is_err() || last {
                        break;
                    }
                }
            });
            // What the app drops before its end, its launcher stops sending.
            Ok(Relayed { head, pieces, gone: Box::new(move || link.cancel(id)) })
        })
    }
}

/// One line of its standard input, bounded; `None` at its end.
async fn read<R: tokio::io::AsyncBufRead + Unpin>(input: &mut R) -> Option<std::io::Result<Vec<u8>>> {
    let mut line = Vec::new();
    match (&mut *input).take(MAX_ASK + 1).read_until(b'\n', &mut line).await {
        Ok(0) => None,
        Ok(_) if line.last() != Some(&b'\n') => Some(Err(std::io::Error::other("a line too long or cut"))),
        Ok(_) => Some(Ok(line)),
        Err(e) => Some(Err(e)),
    }
}

fn failed(why: &str) -> i32 {
    tell_blocking(&Told { id: 0, said: Said::Failed(why.to_string()) });
    1
}
