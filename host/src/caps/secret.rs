//! The `secret` capability's declaration: `[[capabilities.secret]]`, the keys
//! a release asks the person for, each bound to one of its network origins
//! and one place in a request. The values, where they are kept and how a
//! request gets them are `crate::secrets`' (`caps` does not name it: the
//! network filter is handed them as [`super::network::KeyHands`]).

use serde::{Deserialize, Serialize};

use super::network::Origin;
use crate::problems::Problems;

/// Headers the host writes itself (or that frame the request): a secret may
/// not be put there, so a key can never change how a request is framed.
pub const HOST_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "upgrade",
    "te",
    "trailer",
    "expect",
    "http2-settings",
];

/// The longest secret name.
pub const NAME_MAX: usize = 40;

/// One key a release asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretCap {
    /// `[a-z][a-z0-9_-]*`: how the person and the command line name it.
    pub name: String,
    /// What the person reads when they set it.
    pub summary: String,
    /// Where the host adds it: the origin and the place in the request.
    #[serde(flatten)]
    pub binding: Binding,
}

/// Whether a key may go to `origin` at all (issue 72, rule 7): over TLS, or
/// to this computer (a loopback address, or `localhost`, which resolves to
/// one) — never in clear across a network. `secrets::outgoing::inject`
/// holds to it too, for a release stored before the rule.
pub fn is_private_way(origin: &Origin) -> bool {
    origin.scheme == "https"
        || origin.host == "localhost"
        || origin.host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.to_canonical().is_loopback())
}

/// Where a value goes: one origin (no wildcard) and one place in its
/// requests. A value is given only to the binding it was set for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    pub origin: Origin,
    pub place: Place,
}

/// The place in a request a value is put.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "in", rename_all = "lowercase")]
pub enum Place {
    /// A header, its value `format` with `{}` replaced by the key.
    Header { header: String, format: String },
    /// A query parameter, the key percent-encoded.
    Query { query: String },
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::Header { header, format } if format == "{}" => write!(f, "header {header}"),
            Place::Header { header, format } => write!(f, "header {header} as \"{format}\""),
            Place::Query { query } => write!(f, "query parameter {query}"),
        }
    }
}

impl std::fmt::Display for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}, {}", self.origin, self.place)
    }
}

impl Place {
    /// Whether two places are one: the same header (names are not case
    /// sensitive) or the same query parameter.
    pub fn same_spot(&self, other: &Place) -> bool {
        match (self, other) {
            (Place::Header { header: a, .. }, Place::Header { header: b, .. }) => a.eq_ignore_ascii_case(b),
            (Place::Query { query: a }, Place::Query { query: b }) => a == b,
            _ => false,
        }
    }
}

fn is_name(n: &str) -> bool {
    let mut chars = n.chars();
    n.len() <= NAME_MAX
        && chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// Whether `h` is a header name (an HTTP token).
fn is_header_name(h: &str) -> bool {
    !h.is_empty() && h.len() <= 64 && http::HeaderName::from_bytes(h.as_bytes()).is_ok()
}

/// Whether `q` is a query parameter's name that needs no encoding.
fn is_query_name(q: &str) -> bool {
    !q.is_empty() && q.len() <= 64 && q.chars().all(|c| c.is_ascii_alphanumeric() || "-._~".contains(c))
}

/// `[[capabilities.secret]]`: every problem at once, each with its fix.
/// `network` is what the release's `network` declares: a secret's origin
/// must be one of them.
pub fn parse_declared(v: &toml::Value, network: &[Origin], p: &mut Problems) -> Vec<SecretCap> {
    let Some(items) = v.as_array() else {
        p.add("[capabilities] secret must be an array of tables: write each as [[capabilities.secret]]");
        return Vec::new();
    };
    let mut out: Vec<SecretCap> = Vec::new();
    for item in items {
        let Some(t) = item.as_table() else {
            p.add("[capabilities] secret must be an array of tables: write each as [[capabilities.secret]]");
            continue;
        };
        if let Some(s) = one(t, network, p) {
            if out.iter().any(|o| o.name == s.name) {
                p.add(format!("[[capabilities.secret]] `{}` is declared twice: give each secret its own name", s.name));
            } else if let Some(o) =
                out.iter().find(|o| o.binding.origin == s.binding.origin && o.binding.place.same_spot(&s.binding.place))
            {
                p.add(format!(
                    "[[capabilities.secret]] `{}` and `{}` both go to {} in {}: a place holds one secret, so put one of them elsewhere",
                    o.name, s.name, s.binding.origin, s.binding.place
                ));
            } else {
                out.push(s);
            }
        }
    }
    out
}

fn one(t: &toml::Table, network: &[Origin], p: &mut Problems) -> Option<SecretCap> {
    let at = "a [[capabilities.secret]]";
    p.unknown_keys(t, at, &["name", "origin", "header", "format", "query", "summary"]);
    let name = p.string(t, at, "name");
    if let Some(n) = name.as_deref().filter(|n| !is_name(n)) {
        p.add(format!(
            "[[capabilities.secret]] name `{}` must be lowercase letters, digits, '_' and '-', starting with a letter, at most {NAME_MAX} characters (like \"weather\")",
            n.escape_debug()
        ));
    }
    let at = match &name {
        Some(n) => format!("[[capabilities.secret]] `{}`", n.escape_debug()),
        None => at.to_string(),
    };
    let summary = p.string(t, &at, "summary");
    if summary.as_deref().is_some_and(|s| s.trim().is_empty() || s.chars().count() > 200) {
        p.add(format!("{at}: summary must be one line of 1 to 200 characters saying what the key is for"));
    }
    let origin = p.string(t, &at, "origin").and_then(|o| match Origin::parse(&o) {
        Err(e) => {
            p.add(format!("{at}: {e}"));
            None
        }
        Ok(o) if o.wildcard => {
            p.add(format!("{at}: origin `{o}` has a wildcard; a secret goes to one origin: name it whole (like \"https://api.example.com\")"));
            None
        }
        Ok(o) if !is_private_way(&o) => {
            p.add(format!("{at}: origin `{o}` is plain HTTP to another computer, so the key would cross the network in clear; bind it to https://{}{} (plain http:// only to this computer: 127.0.0.1, ::1, localhost)", o.host, if o.port == 80 { String::new() } else { format!(":{}", o.port) }));
            None
        }
        Ok(o) if !network.contains(&o) => {
            p.add(format!("{at}: origin `{o}` is not one of [capabilities] network; add \"{o}\" there, or bind the secret to an origin the app reaches"));
            None
        }
        Ok(o) => Some(o),
    });
    let place = place(t, &at, p);
    Some(SecretCap {
        name: name.filter(|n| is_name(n))?,
        summary: summary?,
        binding: Binding { origin: origin?, place: place? },
    })
}

fn place(t: &toml::Table, at: &str, p: &mut Problems) -> Option<Place> {
    let string = |key: &str, p: &mut Problems| match t.get(key) {
        None => None,
        Some(toml::Value::String(s)) => Some(s.clone()),
        Some(_) => {
            p.add(format!("{at}: {key} must be a string"));
            None
        }
    };
    let header = string("header", p);
    let query = string("query", p);
    let format = string("format", p);
    match (header, query) {
        (Some(_), Some(_)) => {
            p.add(format!("{at} names both a header and a query parameter: a secret goes to one place, so keep one"));
            None
        }
        (None, None) => {
            p.add(format!("{at} says nowhere to put it: add header = \"Authorization\" (with format = \"Bearer {{}}\") or query = \"appid\""));
            None
        }
        (Some(header), None) => {
            if !is_header_name(&header) {
                p.add(format!(
                    "{at}: header `{}` is not a header name (letters, digits and !#$%&'*+-.^_`|~)",
                    header.escape_debug()
                ));
                return None;
            }
            if HOST_HEADERS.contains(&header.to_ascii_lowercase().as_str()) {
                p.add(format!("{at}: header `{header}` is the host's own (it frames the request); put the key in another header, like Authorization"));
                return None;
            }
            let format = format.unwrap_or_else(|| "{}".to_string());
            let ok = format.matches("{}").count() == 1
                && http::HeaderValue::from_str(&format.replace("{}", "k")).is_ok()
                && format.chars().all(|c| c == ' ' || c.is_ascii_graphic());
            if !ok {
                p.add(format!(
                    "{at}: format `{}` must hold {{}} once, where the key goes, and only printable ASCII (like \"Bearer {{}}\")",
                    format.escape_debug()
                ));
                return None;
            }
            Some(Place::Header { header, format })
        }
        (None, Some(query)) => {
            if format.is_some() {
                p.add(format!("{at}: format is for a header; a query parameter holds the key alone, so remove format"));
                return None;
            }
            if !is_query_name(&query) {
                p.add(format!(
                    "{at}: query `{}` must be letters, digits and -._~, at most 64 characters",
                    query.escape_debug()
                ));
                return None;
            }
            Some(Place::Query { query })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<SecretCap>, Vec<String>> {
        let v: toml::Table = toml::from_str(text).expect("TOML");
        let network = vec![
            Origin::parse("https://api.weather.example").unwrap(),
            Origin::parse("https://*.example.com").unwrap(),
        ];
        let mut p = Problems::default();
        let out = parse_declared(&v["secret"], &network, &mut p);
        if p.0.is_empty() { Ok(out) } else { Err(p.0) }
    }

    #[test]
    fn a_secret_is_bound_to_one_of_the_release_s_origins_and_one_place() {
        let ok = parse(
            "[[secret]]\nname = \"weather\"\norigin = \"https://api.weather.example\"\nheader = \"Authorization\"\nformat = \"Bearer {}\"\nsummary = \"Your key\"\n\
             [[secret]]\nname = \"appid\"\norigin = \"https://api.weather.example\"\nquery = \"appid\"\nsummary = \"Another\"\n",
        )
        .expect("two good secrets");
        assert_eq!(ok[0].binding.place, Place::Header { header: "Authorization".into(), format: "Bearer {}".into() });
        assert_eq!(ok[1].binding.place, Place::Query { query: "appid".into() });
        assert_eq!(ok[0].binding.to_string(), "https://api.weather.example, header Authorization as \"Bearer {}\"");

        let refused = |body: &str, says: &str| {
            let text = format!("[[secret]]\nsummary = \"s\"\n{body}\n");
            let problems = parse(&text).expect_err(body);
            assert!(problems.iter().any(|p| p.contains(says)), "{body}: {problems:?}");
        };
        refused(
            "name = \"k\"\norigin = \"https://elsewhere.example\"\nheader = \"X-Key\"",
            "is not one of [capabilities] network",
        );
        refused("name = \"k\"\norigin = \"https://*.example.com\"\nheader = \"X-Key\"", "has a wildcard");
        // Issue 72, rule 7: a key goes over TLS, or to this computer only.
        refused(
            "name = \"k\"\norigin = \"http://api.weather.example\"\nheader = \"X-Key\"",
            "bind it to https://api.weather.example (plain",
        );
        refused("name = \"k\"\norigin = \"https://api.weather.example\"\nheader = \"Host\"", "is the host's own");
        refused(
            "name = \"k\"\norigin = \"https://api.weather.example\"\nheader = \"content-length\"",
            "is the host's own",
        );
        refused(
            "name = \"k\"\norigin = \"https://api.weather.example\"\nheader = \"Transfer-Encoding\"",
            "is the host's own",
        );
        refused("name = \"k\"\norigin = \"https://api.weather.example\"\nheader = \"X Key\"", "is not a header name");
        refused(
            "name = \"k\"\norigin = \"https://api.weather.example\"\nheader = \"X-Key\"\nformat = \"Bearer\"",
            "must hold {} once",
        );
        refused(
            "name = \"k\"\norigin = \"https://api.weather.example\"\nheader = \"X-Key\"\nformat = \"{} {}\"",
            "must hold {} once",
        );
        refused(
            "name = \"k\"\norigin = \"https://api.weather.example\"\nheader = \"X-Key\"\nformat = \"B\\r\\nX: {}\"",
            "must hold {} once",
        );
        refused("name = \"k\"\norigin = \"https://api.weather.example\"\nquery = \"a b\"", "must be letters, digits");
        refused(
            "name = \"k\"\norigin = \"https://api.weather.example\"\nquery = \"a\"\nformat = \"{}\"",
            "format is for a header",
        );
        refused(
            "name = \"k\"\norigin = \"https://api.weather.example\"\nquery = \"a\"\nheader = \"X\"",
            "both a header and a query",
        );
        refused("name = \"k\"\norigin = \"https://api.weather.example\"", "says nowhere to put it");
        refused("name = \"Key\"\norigin = \"https://api.weather.example\"\nquery = \"a\"", "must be lowercase letters");
        refused(
            "name = \"k\"\norigin = \"https://api.weather.example\"\nquery = \"a\"\nwhere = \"x\"",
            "unknown key `where`",
        );

        let twice = parse(
            "[[secret]]\nname = \"a\"\norigin = \"https://api.weather.example\"\nheader = \"X-Key\"\nsummary = \"s\"\n\
             [[secret]]\nname = \"b\"\norigin = \"https://api.weather.example\"\nheader = \"x-key\"\nsummary = \"s\"\n\
             [[secret]]\nname = \"a\"\norigin = \"https://api.weather.example\"\nquery = \"a\"\nsummary = \"s\"\n",
        )
        .expect_err("one place, one name");
        assert!(twice.iter().any(|p| p.contains("both go to")), "{twice:?}");
        // One query parameter holds one key; two parameters hold two.
        let query = |a: &str, b: &str| {
            parse(&format!(
                "[[secret]]\nname = \"a\"\norigin = \"https://api.weather.example\"\nquery = \"{a}\"\nsummary = \"s\"\n\
                 [[secret]]\nname = \"b\"\norigin = \"https://api.weather.example\"\nquery = \"{b}\"\nsummary = \"s\"\n"
            ))
        };
        assert!(query("k", "k").unwrap_err().iter().any(|p| p.contains("both go to")));
        assert_eq!(query("k", "key").unwrap().len(), 2);
        assert!(
            !Place::Query { query: "k".into() }.same_spot(&Place::Header { header: "k".into(), format: "{}".into() })
        );
        assert!(twice.iter().any(|p| p.contains("declared twice")), "{twice:?}");
    }
}
