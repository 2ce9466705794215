//! One app's long call does not hold up another app's calls: the runtime
//! yields a running guest's thread once per epoch tick.

use autoapp::apps::{Apps, ErrorKind};
use autoapp::config::Config;
use autoapp::gate::Caller;
use autoapp::manifest::AppId;
use autoapp::root::Root;

use crate::support::TestRoot;

#[test]
fn a_long_loop_in_one_app_does_not_delay_another_apps_calls() {
    let t = TestRoot::new();
    t.install("hostile");
    t.install("notes");
    let config = Config { call_deadline_ms: 3000, ..Config::default() };
    let apps = Apps::new(Root::open(t.path()).unwrap(), &config).unwrap();
    let me = Caller::command_line();
    let (hostile, notes) = (AppId::parse("hostile").unwrap(), AppId::parse("notes").unwrap());

    // One thread only: if the loop did not yield, the notes call could not run.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let spin = apps.call(&me, &hostile, "spin", "{}");
        tokio::pin!(spin);
        let mut answered = 0;
        for i in 0..5 {
            let title = format!("written while the other app loops {i}");
            let input = serde_json::json!({ "title": title }).to_string();
            let add = apps.call(&me, &notes, "notes.add", &input);
            tokio::select! {
                biased;
                r = &mut spin => panic!("the loop ended before the other app was served: {r:?}"),
                r = add => { r.expect("notes.add answers"); answered += 1; }
            }
        }
        assert_eq!(answered, 5);
        let e = spin.await.expect_err("the loop is stopped at its deadline");
        assert_eq!(e.kind, ErrorKind::Trap);
        assert!(e.message.contains("deadline"), "{e}");
    });
}
