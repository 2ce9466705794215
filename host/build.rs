//! Rebuilds the binary when the files it embeds change: the starter template
//! and the WIT package (`include_dir!` does not tell cargo about them).
fn main() {
    println!("cargo:rerun-if-changed=../starter-template");
    println!("cargo:rerun-if-changed=../wit");
    println!("cargo:rerun-if-changed=../config/autoapp.toml");
}
