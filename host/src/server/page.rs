//! The two pages: the app renderer and the panel. Each is one static HTML
//! document with its script and stylesheet inline, served with a CSP that
//! names their SHA-256 hashes and nothing else: no other script, style,
//! frame, form target or connection than this server may run or load.

use std::sync::OnceLock;

use base64::Engine as _;
use sha2::Digest as _;

const COMMON_CSS: &str = include_str!("../../assets/common.css");
const COMMON_JS: &str = include_str!("../../assets/common.js");
const APP_JS: &str = include_str!("../../assets/app.js");
const PANEL_JS: &str = include_str!("../../assets/panel.js");

/// A page and the Content-Security-Policy it is served with.
pub struct Page {
    pub html: String,
    pub csp: String,
}

fn hash(text: &str) -> String {
    format!("'sha256-{}'", base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(text.as_bytes())))
}

fn build(title: &str, script: &str) -> Page {
    let style = COMMON_CSS.to_string();
    let script = format!("{COMMON_JS}\n{script}");
    let html = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title><style>{style}</style></head>\
         <body><div id=\"strip\" class=\"strip\" aria-live=\"polite\"></div><main id=\"root\"></main><script>{script}</script></body></html>\n"
    );
    let csp = format!(
        "default-src 'none'; script-src {}; style-src {}; connect-src 'self'; img-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'",
        hash(&script),
        hash(&style)
    );
    Page { html, csp }
}

/// The renderer every app's page is.
pub fn app() -> &'static Page {
    static PAGE: OnceLock<Page> = OnceLock::new();
    PAGE.get_or_init(|| build("Autoapp", APP_JS))
}

/// The panel.
pub fn panel() -> &'static Page {
    static PAGE: OnceLock<Page> = OnceLock::new();
    PAGE.get_or_init(|| build("Autoapp", PANEL_JS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_csp_names_exactly_the_inline_script_and_style() {
        for page in [app(), panel()] {
            let script = page.html.split("<script>").nth(1).unwrap().split("</script>").next().unwrap();
            let style = page.html.split("<style>").nth(1).unwrap().split("</style>").next().unwrap();
            assert!(page.csp.contains(&format!("script-src {}", hash(script))));
            assert!(page.csp.contains(&format!("style-src {}", hash(style))));
            assert!(page.csp.starts_with("default-src 'none'"));
            assert!(!page.csp.contains("unsafe"));
            assert!(page.csp.contains("frame-ancestors 'none'"));
        }
    }

    #[test]
    fn the_scripts_never_write_markup() {
        for js in [COMMON_JS, APP_JS, PANEL_JS] {
            for banned in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"] {
                assert!(!js.contains(banned), "a page script uses {banned}");
            }
        }
    }
}
