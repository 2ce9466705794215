//! The problems found in a file a person wrote (the manifest): every one is
//! collected, so all are reported at once, each with its fix. A leaf.

#[derive(Default)]
pub struct Problems(pub Vec<String>);

impl Problems {
    pub fn add(&mut self, s: impl Into<String>) {
        self.0.push(s.into());
    }

    pub fn string(&mut self, t: &toml::Table, where_: &str, key: &str) -> Option<String> {
        match t.get(key) {
            Some(toml::Value::String(s)) => Some(s.clone()),
            Some(_) => {
                self.add(format!("{where_}: {key} must be a string"));
                None
            }
            None => {
                self.add(format!("{where_} has no {key}: add {key} = \"...\""));
                None
            }
        }
    }

    pub fn unknown_keys(&mut self, t: &toml::Table, where_: &str, known: &[&str]) {
        for k in t.keys().filter(|k| !known.contains(&k.as_str())) {
            self.add(format!("{where_} has an unknown key `{}`: the keys are {}", k.escape_debug(), known.join(", ")));
        }
    }
}
