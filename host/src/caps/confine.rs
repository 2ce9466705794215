//! Kernel containment of spawned programs: Landlock and resource limits.
//!
//! The host never execs a granted program directly. It runs its own binary as
//! `autoapp __confined <policy> -- <program> <args>`; that process confines
//! itself (Landlock rules, `no_new_privs`, rlimits) and then `exec`s the
//! program, which inherits every restriction. No `unsafe` `pre_exec` hook is
//! needed, and the policy is plain data that tests can read.
//!
//! The policy: read (and execute) the program, the system's libraries and
//! read-only system folders; read the granted file paths (write those granted
//! `write`); write only the scratch folder; connect over TCP only to the ports
//! of granted network origins, bind nothing; abstract UNIX sockets and signals
//! scoped to the sandbox where the kernel offers it (Landlock ABI 6).
//! Filesystem and network rules are required (ABI ≥ 4): on a kernel without
//! them the program does not run at all.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope, path_beneath_rules,
};
use serde::{Deserialize, Serialize};

/// The read-only system folders a program needs to start.
pub const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/bin",
    "/sbin",
    "/etc",
    "/opt",
    "/proc",
    "/dev/null",
    "/dev/zero",
    "/dev/urandom",
    "/dev/random",
    "/dev/tty",
];

/// What one spawned program may do.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    pub connect_ports: Vec<u16>,
    pub cpu_secs: u64,
    pub address_space_bytes: u64,
    pub file_size_bytes: u64,
    pub processes: u64,
}

/// The exit status the shim uses when it cannot confine the program.
pub const CANNOT_CONFINE: i32 = 125;

/// What the running kernel can enforce, decided once.
#[derive(Debug, Clone, Serialize)]
pub struct Support {
    /// Filesystem and TCP rules are enforced (required to run programs).
    pub enforced: bool,
    /// A sentence for `explain` and `status`.
    pub summary: String,
}

/// Probes the kernel by confining a throwaway child (`autoapp __landlock-probe`).
pub fn probe(self_exe: &Path) -> Support {
    let out = std::process::Command::new(self_exe).arg("__landlock-probe").env_clear().output();
    match out {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout).trim().to_string();
            Support { enforced: true, summary: text }
        }
        Ok(o) => Support { enforced: false, summary: String::from_utf8_lossy(&o.stdout).trim().to_string() },
        Err(e) => Support { enforced: false, summary: format!("the Landlock probe could not run ({e})") },
    }
}

/// `autoapp __landlock-probe`: confines itself and reports what held.
pub fn probe_main() -> i32 {
    let policy = Policy {
        cpu_secs: 1,
        address_space_bytes: 1 << 30,
        file_size_bytes: 1 << 20,
        processes: 16,
        ..Policy::default()
    };
    match restrict(&policy) {
        Ok(scoped) => {
            println!(
                "Landlock confines spawned programs: files and TCP{}",
                if scoped {
                    ", abstract sockets and signals"
                } else {
                    " (this kernel cannot scope abstract sockets and signals)"
                }
            );
            0
        }
        Err(why) => {
            println!("this kernel cannot confine spawned programs with Landlock ({why})");
            1
        }
    }
}

/// Applies `policy` to the calling process: Landlock, `no_new_privs`, rlimits.
/// Returns whether the scopes (ABI 6) were enforced too.
fn restrict(policy: &Policy) -> Result<bool, String> {
    let abi = ABI::V4;
    let err = |e: landlock::RulesetError| e.to_string();
    let ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(err)?
        .handle_access(AccessNet::from_all(abi))
        .map_err(err)?
        .set_compatibility(CompatLevel::BestEffort)
        .scope(Scope::from_all(ABI::V6))
        .map_err(err)?;
    let mut created = ruleset.create().map_err(err)?;
    let read: Vec<&Path> = SYSTEM_READ.iter().map(Path::new).chain(policy.read.iter().map(PathBuf::as_path)).collect();
    created = created.add_rules(path_beneath_rules(read, AccessFs::from_read(abi))).map_err(err)?;
    created = created.add_rules(path_beneath_rules(&policy.write, AccessFs::from_all(abi))).map_err(err)?;
    for port in &policy.connect_ports {
        created = created.add_rule(NetPort::new(*port, AccessNet::ConnectTcp)).map_err(err)?;
    }
    let status = created.restrict_self().map_err(err)?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(true),
        RulesetStatus::PartiallyEnforced => Ok(false),
        RulesetStatus::NotEnforced => Err("Landlock is not enabled in this kernel".into()),
    }
}

/// Sets `resource` to `value`, or to the hard limit already in place when
/// that is lower (a process cannot raise it).
fn limit(resource: rustix::process::Resource, value: u64) -> Result<(), String> {
    let hard = rustix::process::getrlimit(resource).maximum;
    let value = hard.map_or(value, |h| value.min(h));
    let r = rustix::process::Rlimit { current: Some(value), maximum: Some(value) };
    rustix::process::setrlimit(resource, r).map_err(|e| format!("cannot set a resource limit: {e}"))
}

/// `autoapp __confined <policy-json> -- <program> <args>`: confines itself,
/// then becomes the program. Returns only when it could not.
pub fn confined_main(args: &[String]) -> i32 {
    use std::os::unix::process::CommandExt as _;
    let (Some(policy), Some(sep), Some(program)) = (args.first(), args.get(1), args.get(2)) else {
        eprintln!("autoapp: __confined needs a policy, `--` and a program");
        return CANNOT_CONFINE;
    };
    if sep != "--" {
        eprintln!("autoapp: __confined needs `--` before the program");
        return CANNOT_CONFINE;
    }
    let policy: Policy = match serde_json::from_str(policy) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("autoapp: the confinement policy is malformed ({e})");
            return CANNOT_CONFINE;
        }
    };
    let limits = [
        (rustix::process::Resource::Cpu, policy.cpu_secs),
        (rustix::process::Resource::As, policy.address_space_bytes),
        (rustix::process::Resource::Fsize, policy.file_size_bytes),
        (rustix::process::Resource::Nproc, policy.processes),
        (rustix::process::Resource::Core, 0),
    ];
    for (resource, value) in limits {
        if let Err(e) = limit(resource, value) {
            eprintln!("autoapp: {e}");
            return CANNOT_CONFINE;
        }
    }
    if let Err(why) = restrict(&policy) {
        eprintln!("autoapp: the program was not run: it could not be confined ({why})");
        return CANNOT_CONFINE;
    }
    let e = std::process::Command::new(program).args(&args[3..]).exec();
    eprintln!("autoapp: the program could not start ({e})");
    127
}

/// Whether `argv` fits the grant's argument `pattern`: the same number of
/// arguments, each equal to the pattern's, where `*` is one free argument
/// that may not start with `-`.
pub fn argv_fits(pattern: &[String], argv: &[String]) -> bool {
    pattern.len() == argv.len()
        && pattern.iter().zip(argv).all(|(p, a)| if p == "*" { !a.starts_with('-') } else { p == a })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn an_argv_fits_its_pattern_or_not() {
        let p = s(&["--from=markdown", "--to=html", "*"]);
        assert!(argv_fits(&p, &s(&["--from=markdown", "--to=html", "notes.md"])));
        assert!(
            !argv_fits(&p, &s(&["--from=markdown", "--to=html", "--lua-filter=x.lua"])),
            "a free argument may not be an option"
        );
        assert!(!argv_fits(&p, &s(&["--from=markdown", "--to=html"])));
        assert!(!argv_fits(&p, &s(&["--from=markdown", "--to=html", "a", "b"])));
        assert!(!argv_fits(&p, &s(&["--from=html", "--to=html", "a"])));
    }
}
