use super::*;

fn plan(dir: &Path) -> Plan {
    let ws = dir.join("ws");
    Plan {
        ws_read: vec![ws.join("src"), ws.join("Cargo.toml")],
        ws: ws.clone(),
        target_dir: ws.join("target"),
        scratch: dir.join("root/cache/builds/1-0"),
        sysroot: dir.join("toolchain"),
        toolchain_name: Some("1.95.0".into()),
        cargo_home: dir.join("cargo"),
        rustup_home: Some(dir.join("rustup")),
        configs: vec![dir.join(".cargo/config.toml")],
        also_read: vec![dir.join("wit")],
        network: Network::of(&[("HTTPS_PROXY".into(), "http://proxy:3128".into())], None),
        deadline_secs: 60,
        unconfined: false,
        lang: None,
    }
}

fn names(env: &[(String, String)]) -> Vec<&str> {
    env.iter().map(|(k, _)| k.as_str()).collect()
}

#[test]
fn the_fetch_reaches_only_the_registry_and_writes_only_downloads_the_lock_file_and_scratch() {
    let d = Path::new("/d");
    let p = plan(d);
    let f = p.fetch();
    assert_eq!(f.system, System::Build);
    assert_eq!(f.sockets, Sockets::TcpUdp);
    assert_eq!(f.connect_ports, [53, 443, 3128]);
    assert_eq!(
        f.write,
        [
            d.join("cargo/registry"),
            d.join("cargo/git"),
            d.join("cargo/.package-cache"),
            d.join("cargo/.package-cache-mutate"),
            d.join("root/cache/builds/1-0"),
            d.join("ws/Cargo.lock"),
            PathBuf::from("/dev/null")
        ]
    );
    for read in [d.join("ws/src"), d.join("toolchain"), d.join(".cargo/config.toml"), d.join("wit")] {
        assert!(f.read.contains(&read), "{}", read.display());
    }
    assert!(!f.read.iter().chain(&f.write).any(|p| p == d || p.ends_with("cargo") || p.ends_with("ws")), "{f:?}");
    assert_eq!(f.list, [d.join("ws")]);
    assert_eq!(f.wall_secs, Some(60));
    assert!(!f.unconfined);
    assert!(names(&f.env).contains(&"HTTPS_PROXY"), "the fetch is given the proxy");
}

#[test]
fn the_build_reaches_nothing_and_writes_only_its_target_folder() {
    let d = Path::new("/d");
    let p = plan(d);
    let b = p.build();
    assert_eq!(b.system, System::Build);
    assert_eq!(b.sockets, Sockets::None);
    assert!(b.connect_ports.is_empty());
    assert_eq!(
        b.write,
        [
            d.join("ws/target"),
            d.join("root/cache/builds/1-0"),
            d.join("cargo/.package-cache"),
            d.join("cargo/.package-cache-mutate"),
            PathBuf::from("/dev/null")
        ]
    );
    for read in [d.join("ws/src"), d.join("toolchain"), d.join("cargo/registry"), d.join("cargo/git"), d.join("wit")] {
        assert!(b.read.contains(&read), "{}", read.display());
    }
    assert!(!b.read.contains(&d.join("cargo")), "never cargo's home itself (credentials.toml, config.toml)");
    assert_eq!(b.wall_secs, Some(60));
    assert_eq!((b.cpu_secs, b.file_size_bytes, b.processes), (3600, 8 * 1024 * 1024 * 1024, 4096));
    assert_eq!(b.address_space_bytes, u64::MAX, "no address-space limit: wasmtime and rustc reserve much");
    assert!(!names(&b.env).contains(&"HTTPS_PROXY"), "the build is not given the proxy");
    let unconfined = Plan { unconfined: true, ..p };
    assert!(unconfined.build().unconfined && unconfined.fetch().unconfined);
}

#[test]
fn a_step_sees_an_environment_made_of_a_short_list() {
    let d = Path::new("/d");
    let p = plan(d);
    let env = p.env(false);
    assert_eq!(
        names(&env),
        [
            "PATH",
            "HOME",
            "TMPDIR",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "LANG",
            "CARGO_CACHE_AUTO_CLEAN_FREQUENCY",
            "RUSTUP_HOME",
            "RUSTUP_TOOLCHAIN"
        ]
    );
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str()).unwrap();
    assert_eq!(get("PATH"), "/d/toolchain/bin:/usr/local/bin:/usr/bin:/bin");
    assert_eq!(get("HOME"), "/d/root/cache/builds/1-0/home");
    assert_eq!(get("TMPDIR"), "/d/root/cache/builds/1-0/tmp");
    assert_eq!(get("CARGO_HOME"), "/d/cargo/autoapp-builds");
    assert_eq!(get("CARGO_TARGET_DIR"), "/d/ws/target");
    assert_eq!(get("LANG"), "C.UTF-8");
    assert_eq!(get("RUSTUP_TOOLCHAIN"), "1.95.0");
    let fetch = p.env(true);
    assert_eq!(fetch.len(), env.len() + 1);
    let bare = Plan { rustup_home: None, toolchain_name: None, lang: Some("de_DE.UTF-8".into()), ..plan(d) };
    let env = bare.env(false);
    assert!(!names(&env).contains(&"RUSTUP_HOME") && !names(&env).contains(&"RUSTUP_TOOLCHAIN"));
    assert!(env.contains(&("LANG".into(), "de_DE.UTF-8".into())));
}

#[test]
fn the_network_comes_from_proxies_and_the_persons_registry_keys_never_their_tokens() {
    let vars: Vec<(String, String)> = [
        ("https_proxy", "http://user:pw@proxy.example:8080"),
        ("no_proxy", "localhost"),
        ("NO_PROXY", "127.0.0.1"),
        ("SSL_CERT_FILE", "/etc/ssl/mine.pem"),
        ("GITHUB_TOKEN", "ghp_secret"),
        ("SSH_AUTH_SOCK", "/run/ssh.sock"),
        ("ALL_PROXY", ""),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let home = r#"
[registry]
token = "cio-secret"
default = "mine"
global-credential-providers = ["cargo:token"]
[registries.mine]
index = "sparse+https://mirror.example:8443/index/"
token = "also-secret"
[registries.local]
index = "file:///srv/index"
[source.crates-io]
replace-with = "mirror"
[source.mirror]
registry = "sparse+https://mirror.example:8443/index/"
[source.vendored]
directory = "/srv/vendor"
[source.other]
replace-with = "vendored"
[http]
proxy = "http://corp:3129"
cainfo = "/etc/corp.pem"
[build]
rustc-wrapper = "sccache"
"#;
    let n = Network::of(&vars, Some(home));
    assert_eq!(n.ports, [53, 443, 3129, 8080, 8443]);
    assert_eq!(names(&n.env), ["https_proxy", "no_proxy", "NO_PROXY", "SSL_CERT_FILE"]);
    assert_eq!(n.read, [PathBuf::from("/etc/ssl/mine.pem"), PathBuf::from("/etc/corp.pem")]);
    let args = n.config_args.join(" ");
    for passed in [
        r#"registry.default="mine""#,
        r#"http.proxy="http://corp:3129""#,
        r#"registries.mine.index="sparse+https://mirror.example:8443/index/""#,
        r#"source.crates-io.replace-with="mirror""#,
        r#"source.mirror.registry="sparse+https://mirror.example:8443/index/""#,
    ] {
        assert!(args.contains(passed), "{passed} in {args}");
    }
    for never in ["secret", "token", "credential", "sccache", "file://", "vendor"] {
        assert!(!args.contains(never), "{never} in {args}");
    }
    assert_eq!(Network::of(&[], None).ports, [53, 443]);
}

#[test]
fn a_url_names_its_port_or_its_schemes() {
    assert_eq!(port_of("https://index.crates.io/"), Some(443));
    assert_eq!(port_of("sparse+https://m.example:8443/x"), Some(8443));
    assert_eq!(port_of("http://user:p@proxy:3128"), Some(3128));
    assert_eq!(port_of("http://proxy"), Some(80));
    assert_eq!(port_of("socks5://s"), Some(1080));
    assert_eq!(port_of("http://[::1]:9000/"), Some(9000));
    assert_eq!(port_of("http://[::1]/"), Some(80));
    assert_eq!(port_of("proxy:3128"), Some(3128));
    assert_eq!(port_of("weird://host"), None);
    assert_eq!(port_of("ssh://git@host/r"), Some(22));
    assert_eq!(port_of("git://host/r"), Some(9418));
}

#[test]
fn the_workspace_is_readable_but_its_git_folders_and_what_symlinks_lead_to() {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    for d in [".git/refs", "src/nested/.git", "src/nested/code", "src/plain", "assets"] {
        std::fs::create_dir_all(ws.join(d)).unwrap();
    }
    for f in ["Cargo.toml", ".git/config", "src/lib.rs", "src/nested/code/a.rs", "src/nested/b.rs", "src/plain/c.rs"] {
        std::fs::write(ws.join(f), "x").unwrap();
    }
    std::os::unix::fs::symlink("/etc", ws.join("etc-link")).unwrap();
    // The target folder is not walked: a .git a build script made there changes nothing.
    std::fs::create_dir_all(ws.join("target/.git")).unwrap();
    let got: Vec<String> = readable(&ws, &ws.join("target"))
        .unwrap()
        .iter()
        .map(|p| p.strip_prefix(&ws).unwrap().display().to_string())
        .collect();
    assert_eq!(
        got,
        ["Cargo.toml", "assets", "src/lib.rs", "src/nested/b.rs", "src/nested/code", "src/plain", "target"]
    );
    // Past the walk's limit, nothing is granted (a .git beyond it is never read): the build is refused.
    // Entries walked: the top's six, src's three, nested's three, code's one, plain's one.
    assert!(readable_within(&ws, &ws.join("target"), 14).is_some());
    assert!(readable_within(&ws, &ws.join("target"), 13).is_none());
    // Without a .git folder, the workspace is one rule.
    let plain = tempfile::tempdir().unwrap();
    std::fs::write(plain.path().join("Cargo.toml"), "x").unwrap();
    assert_eq!(readable(plain.path(), &plain.path().join("target")).unwrap(), [plain.path().to_path_buf()]);
}

#[test]
fn each_step_starts_from_an_empty_scratch_folder_and_a_cargo_home_of_links_only() {
    let dir = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(dir.path()).unwrap();
    let p = plan(&d);
    std::fs::create_dir_all(d.join("cargo")).unwrap();
    std::fs::write(d.join("cargo/credentials.toml"), "[registry]\ntoken = \"t\"\n").unwrap();
    p.fresh_scratch().unwrap();
    let home = p.build_cargo_home();
    assert_eq!(home, d.join("cargo/autoapp-builds"));
    // Whatever is left in either is gone before the next step.
    std::fs::write(home.join("config.toml"), "[build]\nrustc-wrapper = \"/bin/sh\"\n").unwrap();
    std::fs::create_dir(home.join("bin")).unwrap();
    std::fs::remove_file(home.join("git")).unwrap();
    std::os::unix::fs::symlink("/etc", home.join("git")).unwrap();
    std::fs::write(p.scratch().join("home/.gitconfig"), "[core]\nsshCommand = x\n").unwrap();
    p.fresh_scratch().unwrap();
    let mut names: Vec<String> =
        std::fs::read_dir(&home).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, [".package-cache", ".package-cache-mutate", "git", "registry"]);
    assert!(!p.scratch().join("home/.gitconfig").exists());
    assert_eq!(std::fs::read_link(home.join("registry")).unwrap(), d.join("cargo/registry"));
    assert_eq!(std::fs::read_link(home.join("git")).unwrap(), d.join("cargo/git"), "a wrong link is made again");
    assert_eq!(std::fs::read_link(home.join(".package-cache")).unwrap(), d.join("cargo/.package-cache"));
    assert!(d.join("cargo/.package-cache-mutate").is_file(), "the shared lock files exist");
    assert!(d.join("cargo/credentials.toml").exists(), "the person's own files are left alone");
    assert!(d.join("cargo/registry").is_dir() && p.scratch().join("tmp").is_dir());
    // A second build beside it makes the same home without tripping.
    p.fresh_scratch().unwrap();
    // A link named as one of them but leading to another is made again too.
    std::fs::remove_file(home.join("git")).unwrap();
    std::os::unix::fs::symlink(d.join("cargo/registry"), home.join("git")).unwrap();
    p.fresh_scratch().unwrap();
    assert_eq!(std::fs::read_link(home.join("git")).unwrap(), d.join("cargo/git"));
}
