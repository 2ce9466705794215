//! A launcher's worker, once confined (`worker::main` with `serve`): reads
//! whose it is, then the calls its launcher's gate passed, one JSON line
//! each on its standard input, runs each as it comes (many at once), and
//! answers each on its standard output with the call's id. When its
//! standard input ends (the launcher retired it, or ended), it finishes the
//! calls it has and ends.

use std::sync::Arc;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};

use super::Held;
use super::pool::{Ask, Said, Start, Told, What};
use crate::apps::{Ahead, Apps};
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

/// Serves its launcher until its standard input ends.
pub(super) fn main(held: Held) -> i32 {
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt.block_on(serve(held)),
        Err(e) => {
            tell_blocking(&Told { id: 0, said: Said::Failed(format!("the worker could not start ({e})")) });
            1
        }
    }
}

async fn serve(held: Held) -> i32 {
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
    // Confined with Landlock and the filter, it contains its programs the
    // same way (what `confine::probe` would have found).
    let containment = start.containment.unwrap_or_else(|| super::containment_of(held, &start.config));
    let ahead = Ahead { release: String::new(), containment, declared: Vec::new(), keys: Vec::new() };
    let apps = match Apps::confined(root, &start.config, ahead) {
        Ok(apps) => Arc::new(apps),
        Err(e) => return failed(&format!("{e:#}")),
    };
    let app = start.app;
    let (out, mut to_write) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::spawn(async move {
        // The answers ready meanwhile go in one write.
        let (mut queued, mut batch) = (Vec::new(), Vec::new());
        while to_write.recv_many(&mut queued, 256).await > 0 {
            batch.clear();
            for line in queued.drain(..) {
                batch.extend_from_slice(&line);
            }
            if stdout.write_all(&batch).await.is_err() {
                break;
            }
        }
    });
    let say = |out: &tokio::sync::mpsc::UnboundedSender<Vec<u8>>, told: Told| {
        if let Ok(mut bytes) = serde_json::to_vec(&told) {
            bytes.push(b'\n');
            let _ = out.send(bytes);
        }
    };
    say(&out, Told { id: 0, said: Said::Ready { held: held.into() } });
    let mut calls = tokio::task::JoinSet::new();
    while let Some(Ok(line)) = read(&mut input).await {
        // It holds the keys: cleared when dropped.
        let line = zeroize::Zeroizing::new(line);
        let Ok(Ask { id, what }) = serde_json::from_slice::<Ask>(&line) else {
            // The launcher wrote it: a line it cannot read ends the worker.
            break;
        };
        drop(line);
        let (apps, app, out) = (apps.clone(), app.clone(), out.clone());
        calls.spawn(async move {
            let answer = match what {
                What::Call { mut call, keys } => {
                    call.keys = keys.into_iter().map(super::Key::into_given).collect();
                    if call.app != app {
                        Err(crate::apps::CallError::new(
                            crate::apps::ErrorKind::Internal,
                            "the call is of another app's worker",
                        ))
                    } else {
                        apps.run_carried(*call).await
                    }
                }
                What::Prepare { release } => {
                    apps.prepare_carried(&app, &release).await.map(|_| serde_json::Value::Null)
                }
                #[cfg(debug_assertions)]
                What::Probe(attempts) => {
                    // On a thread made after confinement, as a guest's code runs.
                    match tokio::task::spawn_blocking(move || super::probe::run(&attempts)).await {
                        Ok(outcomes) => Ok(serde_json::to_value(outcomes).unwrap_or_default()),
                        Err(e) => Err(crate::apps::CallError::new(
                            crate::apps::ErrorKind::Internal,
                            format!("the probe failed ({e})"),
                        )),
                    }
                }
            };
            if let Ok(mut bytes) = serde_json::to_vec(&Told { id, said: Said::Answer(answer) }) {
                bytes.push(b'\n');
                let _ = out.send(bytes);
            }
        });
        // Finished calls are let go as it goes.
        while calls.try_join_next().is_some() {}
    }
    // Retired or its launcher ended: the calls it has finish.
    while calls.join_next().await.is_some() {}
    drop(out);
    let _ = writer.await;
    // Its last rows (reads are batched) and log lines, written before it
    // ends: the launcher waits for its end on a clean stop.
    apps.flush_record();
    crate::applog::flush();
    drop(apps);
    0
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
