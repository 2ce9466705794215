//! What comes from elsewhere: anything the launcher did not make itself is
//! input an attacker may have written — a backup or a package file, a
//! registry's answer, another process on the same root, the text of an
//! agent's plan or an app's view. This room bounds it, checks it and escapes
//! it, once, for every reader (restore now, packages next): no second copy.
//!
//! - [`text`]: outside text on its way to the person (a terminal, a page, a
//!   card): escaped, stripped of invisible format characters, bounded.

#[macro_use]
pub mod text;
