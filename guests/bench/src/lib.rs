//! The benchmarks' app (see `scripts/bench` and docs/performance.md).
//!
//! `hello` answers a constant: the cost of calling it is the host's path
//! (gate, fresh instance, record), which is what benchmark P1 measures against
//! bare wasmtime. `spin` never returns: benchmark P6 runs it beside another app
//! to show that the epoch deadline and yields keep that app's latency.

wit_bindgen::generate!({
    path: "../../wit",
    world: "autoapp:app/app",
    generate_all,
});

use autoapp::app::types::AppError;

struct Bench;

export!(Bench);

impl exports::autoapp::app::routes::Guest for Bench {
    fn handle(route: String, _input: String) -> Result<String, AppError> {
        match route.as_str() {
            "hello" => Ok(r#"{"hello":"world"}"#.to_string()),
            "spin" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            other => Err(AppError::NotFound(format!("no route {other}"))),
        }
    }
}

impl exports::autoapp::app::views::Guest for Bench {
    fn render(page: String, _query: String) -> Result<String, AppError> {
        match page.as_str() {
            "index" => Ok(r#"{"title":"Bench","children":[{"type":"text","text":"hello"}]}"#.to_string()),
            other => Err(AppError::NotFound(format!("no page {other}"))),
        }
    }
}
