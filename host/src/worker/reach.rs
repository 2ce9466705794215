//! What an app's worker may reach: its policy, computed by the process that
//! starts it from the app's release, its grants and the route called — never
//! from anything the worker says.
//!
//! Read (never executed): the system's libraries and the few files of `/etc`
//! a name lookup reads (`confine::System::Build`; when a program is granted,
//! the files of `/etc` programs commonly read and `/proc`, which the
//! confinement's supervisor needs: `confine::System::Program`), the app's
//! folder (its releases, active pointer, activation file, grants, previews
//! and the data snapshots of its own activations), and its app's compiled code
//! (`cache/compiled/<app>`, which it can read and never write: a worker that
//! could write there could plant code that its app's next process would run;
//! another app's compiled code it cannot even read). Written: the app's data (its store
//! and its record), its logs, its previews' copies of the data, its programs'
//! scratch folders. The files the person granted, read or write as granted.
//! Executed: nothing, or — when a program is granted — the host's own binary
//! (the confinement shim), the programs granted, the dynamic loader each
//! names, and the system's folders (a granted program may run the system's
//! programs, as its own policy lets it). No socket: an external route's
//! requests are sent by its launcher (`caps::network::relay`); only a granted
//! program's TCP ports, with UDP beside them for its name lookups.

use std::path::PathBuf;

use crate::caps;
use crate::caps::confine::{Policy, Sockets, System};
use crate::config::Config;
use crate::manifest::{AppId, Manifest};
use crate::root::Root;

/// The policy of a worker of `app` that runs `manifest`'s calls: of its
/// read and write routes and its pages, or (with the person's `grants`) of
/// its external routes (whose origins' programs may connect to). Every release of the app is
/// readable, so a worker of reads and writes serves the next activation as
/// well; the previews found now are writable, so a new one needs a new
/// worker.
pub fn policy(
    root: &Root,
    app: &AppId,
    manifest: &Manifest,
    grants: Option<&crate::grants::Grants>,
    config: &Config,
    me: PathBuf,
) -> anyhow::Result<Policy> {
    let paths = root.app(app);
    let mut policy = Policy {
        system: System::Build,
        // Its app's folder, read: its releases, previews, active pointer
        // and activation file — as they are replaced, since a rule on a
        // file holds the file it named, and a worker that serves its
        // app's pages reads the pointer after every activation.
        read: vec![paths.dir.clone(), root.compiled_of(app)],
        execute: Some(Vec::new()),
        write: vec![paths.data(), crate::applog::dir_of(&paths.dir)],
        sockets: Sockets::None,
        ..Policy::default()
    };
    for p in crate::lifecycle::previews(&paths)? {
        policy.write.push(paths.dir.join("previews").join(&p.release).join("data"));
    }
    if let Some(grants) = grants {
        let declared = &manifest.capabilities;
        let origins = caps::network::configure(&declared.network, &grants.network);
        let folders = caps::files::configure(&declared.files, &grants.files);
        let scratch = crate::apps::scratch_of(root, app);
        let spawn = caps::spawn::configure(&declared.spawn, &grants.spawn, &folders, &origins, config, scratch);
        for f in &folders {
            if f.write { policy.write.push(f.host.clone()) } else { policy.read.push(f.host.clone()) }
        }
        // Its own requests are sent by its launcher (issue 72, rule 1): a
        // worker connects nowhere, but for the programs it was granted.
        let mut ports: Vec<u16> = Vec::new();
        if spawn.programs().next().is_some() {
            // Its programs run under the worker's rules too (Landlock's
            // rules only ever narrow): what they read, run and write.
            policy.system = System::Program;
            // A program may run the system's programs (its own policy lets
            // it), so the worker's rules do too.
            let execute = policy.execute.get_or_insert_default();
            execute.push(me);
            execute.extend(spawn.programs().map(PathBuf::from));
            // The kernel opens each one's loader to execute it.
            let loaders: Vec<PathBuf> = execute.iter().filter_map(|p| interpreter(p)).collect();
            execute.extend(loaders);
            execute.extend(System::Program.paths().into_iter().map(PathBuf::from));
            execute.sort();
            execute.dedup();
            policy.write.push(spawn.scratch_root().to_path_buf());
            ports.extend(spawn.policy().connect_ports.iter().copied());
        }
        ports.sort_unstable();
        ports.dedup();
        if !ports.is_empty() {
            // A program's name lookups go over UDP; Landlock decides the TCP
            // ports.
            policy.sockets = Sockets::TcpUdp;
        }
        policy.connect_ports = ports;
    }
    Ok(policy)
}

/// The program interpreter (the dynamic loader) a 64-bit little-endian ELF
/// file names, which the kernel opens, and Landlock checks, to execute it.
/// None for anything else (a static binary, a script).
fn interpreter(path: &std::path::Path) -> Option<PathBuf> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    const PT_INTERP: u32 = 3;
    let mut f = std::fs::File::open(path).ok()?;
    let mut header = [0u8; 64];
    f.read_exact(&mut header).ok()?;
    // ELF, 64-bit, little-endian.
    if header[..4] != *b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("eight bytes"));
    let (phoff, phentsize, phnum) = (u64_at(&header, 0x20), u16_at(&header, 0x36) as usize, u16_at(&header, 0x38));
    if phentsize < 0x38 {
        return None;
    }
    let mut entry = vec![0u8; phentsize];
    for i in 0..u64::from(phnum.min(64)) {
        f.seek(SeekFrom::Start(phoff.checked_add(i * phentsize as u64)?)).ok()?;
        f.read_exact(&mut entry).ok()?;
        if u32::from_le_bytes(entry[..4].try_into().expect("four bytes")) != PT_INTERP {
            continue;
        }
        let (offset, size) = (u64_at(&entry, 0x08), u64_at(&entry, 0x20));
        if size == 0 || size > 4096 {
            return None;
        }
        let mut name = vec![0u8; size as usize];
        f.seek(SeekFrom::Start(offset)).ok()?;
        f.read_exact(&mut name).ok()?;
        let name = name.split(|b| *b == 0).next()?;
        let name = PathBuf::from(std::str::from_utf8(name).ok()?);
        return name.is_absolute().then_some(name);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loader_of_a_dynamic_program_is_found_and_a_file_that_is_not_elf_has_none() {
        let me = std::env::current_exe().unwrap();
        let loader = interpreter(&me).expect("a test binary is linked dynamically");
        assert!(loader.is_absolute() && loader.exists(), "{}", loader.display());
        let text = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(text.path(), "#!/bin/sh\necho hi\n").unwrap();
        assert_eq!(interpreter(text.path()), None);
        assert_eq!(interpreter(std::path::Path::new("/nonexistent")), None);
    }
}
