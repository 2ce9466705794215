//! A census of every place in the host that runs guest code. Guest code runs
//! only in `Runtime::run`, which takes a `gate::Pass`; a `Pass` is made only by
//! the gate; and `Runtime::run` is called only from `Apps::run`, which the call
//! path reaches through `Gate::guard` and the page path through `Gate::view` —
//! in the launcher's process, or in the app's worker with the pass the
//! launcher's gate made, carried to it (`Pass::carried`, `Apps::run_carried`).
//! A new call site that runs guest code without the gate fails this test.

fn sources() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![crate::support::repo().join("host/src")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(crate::support::repo().join("host/src")).unwrap().display().to_string();
                out.push((rel, std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// Every (file, count) where `needle` occurs outside comments.
fn census(needle: &str) -> Vec<(String, usize)> {
    sources()
        .into_iter()
        .filter_map(|(file, text)| {
            let n = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .map(|l| l.matches(needle).count())
                .sum::<usize>();
            (n > 0).then_some((file, n))
        })
        .collect()
}

/// `text` without any white space, so formatting does not matter.
fn squeeze(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

fn at(list: &[(&str, usize)]) -> Vec<(String, usize)> {
    list.iter().map(|(f, n)| (f.to_string(), *n)).collect()
}

#[test]
fn guest_code_is_entered_only_in_runtime_run() {
    // Instantiating may run a component's start function: in `run` (the
    // call's instance when no spare is there), in the instance thread's
    // `Maker::make_one` (a spare) and in three of `runtime`'s own tests (what a
    // start function is given; used instances freed while the thread is
    // behind; a loop stopped after the epoch ticker slept), each on a store
    // made by `unarmed`, the one `Store::new`: nothing given until `arm`
    // gives the call's plan, in `run`.
    assert_eq!(census("instantiate_async("), at(&[("runtime.rs", 5)]));
    assert_eq!(census("Store::new("), at(&[("runtime.rs", 1)]));
    let runtime = squeeze(&std::fs::read_to_string(crate::support::repo().join("host/src/runtime.rs")).unwrap());
    assert!(
        runtime.contains("fnunarmed(engine:&Engine,config:&Config,ticker:&Arc<Ticker>,deadline:Instant,)"),
        "unarmed makes stores"
    );
    assert_eq!(runtime.matches("arm(&mutstore,&stderr,plan);").count(), 1, "the plan is given in run only");
    assert_eq!(census("call_handle("), at(&[("runtime.rs", 1)]));
    assert_eq!(census("call_render("), at(&[("runtime.rs", 1)]));
    assert_eq!(census(".instantiate("), at(&[]), "no synchronous instantiation anywhere");
}

#[test]
fn runtime_run_takes_a_pass_and_only_apps_calls_it() {
    let runtime = squeeze(&std::fs::read_to_string(crate::support::repo().join("host/src/runtime.rs")).unwrap());
    assert!(runtime.contains("pubasyncfnrun(&self,_pass:&Pass,"), "Runtime::run must require a gate::Pass");
    assert_eq!(census("runtime.run("), at(&[("apps.rs", 1)]));
}

#[test]
fn only_the_gate_makes_a_pass() {
    // Constructions of a Pass: `Pass {` that is not its definition, impl or a return type.
    let made: Vec<(String, usize)> = sources()
        .into_iter()
        .filter_map(|(file, text)| {
            let n = text
                .lines()
                .filter(|l| {
                    l.contains("Pass {") && !l.contains("struct ") && !l.contains("impl ") && !l.contains("-> Pass")
                })
                .count();
            (n > 0).then_some((file, n))
        })
        .collect();
    // Three places, all in the gate: `Gate::guard`'s one pass for whatever
    // answered (the rule's allow, the person's yes, a workflow the person
    // approved, a stand-in), a page view's, and `Pass::carried`: in an app's
    // worker, the pass its launcher's gate made, carried over the channel
    // only the launcher holds.
    assert_eq!(
        made,
        at(&[("gate/mod.rs", 3)]),
        "a pass is made only in the gate: by guard's answer, for a page view, and carried to a worker"
    );
    // A carried pass is made only where a worker runs what its launcher
    // sent, and that is called only by the worker's loop.
    assert_eq!(census("Pass::carried("), at(&[("apps.rs", 2)]));
    assert_eq!(census("run_carried("), at(&[("apps.rs", 1), ("worker/serve.rs", 1)]));
}

#[test]
fn every_path_into_apps_run_passes_the_gate_first() {
    let apps = squeeze(&std::fs::read_to_string(crate::support::repo().join("host/src/apps.rs")).unwrap());
    let functions: Vec<(String, String)> = apps
        .split("asyncfn")
        .skip(1)
        .map(|chunk| (chunk.split('(').next().unwrap().to_string(), chunk.to_string()))
        .collect();
    // Guest code is entered by `Apps::run`, which only the two settling
    // steps call: a route's and a page's.
    let runners: Vec<&str> =
        functions.iter().filter(|(_, body)| body.contains("self.run(")).map(|(n, _)| n.as_str()).collect();
    assert_eq!(runners, ["settle_call", "settle_render"], "the call sites that run guest code");
    // Each is reached after the gate (`call_with`: `Gate::guard`;
    // `render_at`: `Gate::view`), or in a worker with the pass its
    // launcher's gate made (`run_carried`).
    let mut callers = Vec::new();
    for (name, body) in &functions {
        let Some(settle_at) = body.find("self.settle_call(").or_else(|| body.find("self.settle_render(")) else {
            continue;
        };
        let passed_at =
            body.find(".gate.guard(").or_else(|| body.find(".gate.view()")).or_else(|| body.find("Pass::carried("));
        assert!(passed_at.is_some_and(|g| g < settle_at), "`{name}` runs guest code without passing the gate first");
        callers.push(name.as_str());
    }
    assert_eq!(callers, ["run_carried", "call_with", "render_at"], "the paths that settle a call");
}
