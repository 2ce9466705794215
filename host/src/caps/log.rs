//! The `log` capability, and the guest's own stdout/stderr.
//!
//! Lines are sanitised, bounded per call (`log_lines_per_call`) and per line
//! ([`MAX_LINE`]), and go to the app's log file (`applog`, given to the call
//! as a folder; its writer thread appends them) and to the host's `tracing`
//! log with the app id and route.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use crate::bindings::app::autoapp::app::log::{Host, Level};

/// The longest line kept; the rest is cut.
pub const MAX_LINE: usize = 4096;

/// One call's log.
pub struct CallLog {
    app: String,
    /// Where the app's log file is (`applog`); none: the host's log only.
    file: Option<PathBuf>,
    route: String,
    written: u32,
    max: u32,
    dropped: u32,
    /// Takes the keys the call was given out of each line.
    redactor: Option<Arc<dyn super::network::KeyHands>>,
}

impl CallLog {
    pub fn new(app: &str, route: &str, max: u32, file: Option<PathBuf>) -> CallLog {
        CallLog { app: app.to_string(), file, route: route.to_string(), written: 0, max, dropped: 0, redactor: None }
    }

    /// A log that keeps no line: what code running while an instance is
    /// made (before any call is given it) writes to.
    pub fn none() -> CallLog {
        CallLog::new("", "", 0, None)
    }

    /// A log whose lines never hold the keys `redactor` takes out.
    pub fn with_redactor(mut self, redactor: Arc<dyn super::network::KeyHands>) -> CallLog {
        self.redactor = Some(redactor).filter(|r| !r.is_empty());
        self
    }

    /// How many lines were dropped over the cap.
    pub fn dropped(&self) -> u32 {
        self.dropped
    }
}

fn cut(s: &str) -> &str {
    if s.len() <= MAX_LINE {
        return s;
    }
    let mut end = MAX_LINE;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Serves `autoapp:app/log` to a call, from the `CallLog` that `get` projects out of
/// the call's state.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut wasmtime::component::Linker<T>,
    get: fn(&mut T) -> &mut CallLog,
) -> anyhow::Result<()> {
    crate::bindings::app::autoapp::app::log::add_to_linker::<T, wasmtime::component::HasSelf<CallLog>>(linker, get)?;
    Ok(())
}

impl Host for CallLog {
    fn write(&mut self, level: Level, message: String) {
        let log = self;
        if log.written >= log.max {
            log.dropped += 1;
            return;
        }
        log.written += 1;
        let message = match &log.redactor {
            Some(r) => r.text(&message).into_owned(),
            None => message,
        };
        let message = crate::sanitize::secrets(cut(&message));
        let (app, route) = (log.app.as_str(), log.route.as_str());
        let name = match level {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        };
        if let Some(dir) = &log.file {
            // Written by the log's own thread, not in the call's time.
            crate::applog::queue(dir, crate::applog::Line::new(name, route, &message));
        }
        // Escaped only when an event is made of it (the macros format lazily).
        let message = message.escape_debug();
        match level {
            Level::Debug => tracing::debug!(target: "app", app, route, "{message}"),
            Level::Info => tracing::info!(target: "app", app, route, "{message}"),
            Level::Warn => tracing::warn!(target: "app", app, route, "{message}"),
            Level::Error => tracing::error!(target: "app", app, route, "{message}"),
        }
    }
}

/// A guest's stdout or stderr: keeps the first bytes up to a cap and silently
/// drops the rest (a guest that prints too much is not made to fail).
#[derive(Clone)]
pub struct GuestOutput {
    buf: Arc<Mutex<Vec<u8>>>,
    cap: usize,
}

impl GuestOutput {
    pub fn new(cap: usize) -> GuestOutput {
        GuestOutput { buf: Arc::default(), cap }
    }

    /// The last lines written, as text.
    pub fn tail(&self) -> String {
        let buf = self.buf.lock().expect("guest output");
        let start = buf.len().saturating_sub(2048);
        String::from_utf8_lossy(&buf[start..]).into_owned()
    }
}

impl wasmtime_wasi::cli::IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl wasmtime_wasi::cli::StdoutStream for GuestOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let mut buf = self.buf.lock().expect("guest output");
        let room = self.cap.saturating_sub(buf.len());
        buf.extend_from_slice(&data[..data.len().min(room)]);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
