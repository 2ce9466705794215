//! A WebAssembly component from elsewhere, by its framing alone: the
//! top-level sections of a component (a package, next a registry's layer),
//! each section's declared length checked against what is left before it is
//! looked at, never more than the bytes given. What the sections *mean* is
//! the reader's (a package's `autoapp:` sections, `build::check_component`
//! for the component itself).

use std::ops::Range;

use super::{Refused, named, refused};

/// The binary preamble of a component (`\0asm`, version 0x0d, layer 1) and
/// of a core module (version 1, layer 0).
pub const COMPONENT_PREAMBLE: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];
pub const MODULE_PREAMBLE: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];

/// The id of a custom section.
const CUSTOM: u8 = 0;

/// One top-level section of a component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// Where the section starts (its id byte).
    pub start: usize,
    pub id: u8,
    /// A custom section's name (the file's words: show it with [`named`]).
    pub name: Option<String>,
    /// The section's contents: after the name, for a custom section.
    pub payload: Range<usize>,
}

impl Section {
    /// Whether this is the custom section `name`.
    pub fn is_custom(&self, name: &str) -> bool {
        self.id == CUSTOM && self.name.as_deref() == Some(name)
    }
}

/// Appends a custom section `name` holding `payload` to `out`.
pub fn push_custom(out: &mut Vec<u8>, name: &str, payload: &[u8]) {
    let mut body = Vec::with_capacity(name.len() + payload.len() + 5);
    leb128(&mut body, name.len() as u64);
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(payload);
    out.push(CUSTOM);
    leb128(out, body.len() as u64);
    out.extend_from_slice(&body);
}

fn leb128(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Reads an unsigned LEB128 `u32` at `*at` of `bytes` (at most 5 bytes).
fn read_u32(bytes: &[u8], at: &mut usize) -> Result<u64, Refused> {
    let mut value: u64 = 0;
    for i in 0..5 {
        let byte = *bytes
            .get(*at)
            .ok_or_else(|| refused(format!("it ends inside a section at byte {}: it is cut short or damaged", *at)))?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(refused(format!("a length at byte {} runs past five bytes: it is damaged", *at - 5)))
}

/// The top-level sections of the component `bytes`, by their framing alone.
pub fn sections(bytes: &[u8]) -> Result<Vec<Section>, Refused> {
    match bytes.get(..8) {
        Some(p) if p == COMPONENT_PREAMBLE => {}
        Some(p) if p == MODULE_PREAMBLE => {
            return Err(refused(
                "it is a core WebAssembly module, not a component: build it for wasm32-wasip2 (a component)",
            ));
        }
        _ => return Err(refused("it is not a WebAssembly component (its first bytes are not a component's preamble)")),
    }
    let mut at = 8;
    let mut out = Vec::new();
    while at < bytes.len() {
        let start = at;
        let id = bytes[at];
        at += 1;
        let declared = read_u32(bytes, &mut at)?;
        let left = bytes.len() - at;
        if declared > left as u64 {
            return Err(refused(format!(
                "the section at byte {start} declares {declared} bytes but only {left} follow: it is damaged"
            )));
        }
        let end = at + declared as usize;
        let mut section = Section { start, id, name: None, payload: at..end };
        if id == CUSTOM {
            let mut name_at = at;
            let name_len = read_u32(&bytes[..end], &mut name_at)?;
            let name_end = name_at.checked_add(name_len as usize).filter(|e| *e <= end).ok_or_else(|| {
                refused(format!("the name of the custom section at byte {start} runs past the section: it is damaged"))
            })?;
            let name = std::str::from_utf8(&bytes[name_at..name_end]).map_err(|_| {
                refused(format!("the name of the custom section at byte {start} is not UTF-8: it is damaged"))
            })?;
            section.name = Some(name.to_string());
            section.payload = name_end..end;
        }
        out.push(section);
        at = end;
    }
    Ok(out)
}

/// A section as a sentence names it.
pub fn describe(s: &Section) -> String {
    match &s.name {
        Some(n) => format!("the custom section {}", named(n)),
        None => format!("a section of kind {} at byte {}", s.id, s.start),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_read_back_by_their_framing() {
        let mut c = COMPONENT_PREAMBLE.to_vec();
        c.extend_from_slice(&[7, 2, 0xaa, 0xbb]);
        push_custom(&mut c, "autoapp:x", b"payload");
        let s = sections(&c).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].id, s[0].name.clone(), &c[s[0].payload.clone()]), (7, None, &[0xaa, 0xbb][..]));
        assert!(s[1].is_custom("autoapp:x") && !s[0].is_custom("autoapp:x"));
        assert_eq!(&c[s[1].payload.clone()], b"payload");
        assert_eq!(s[1].start, 12);
        assert_eq!(describe(&s[1]), "the custom section \"autoapp:x\"");
        assert_eq!(describe(&s[0]), "a section of kind 7 at byte 8");
        // Only a custom section is one, whatever name a caller gave another.
        let named_other = Section { start: 0, id: 7, name: Some("autoapp:x".into()), payload: 0..0 };
        assert!(!named_other.is_custom("autoapp:x"));
    }

    #[test]
    fn what_is_not_a_component_or_is_cut_is_refused_with_a_sentence() {
        assert!(sections(&MODULE_PREAMBLE).unwrap_err().0.contains("core WebAssembly module"));
        assert!(sections(b"garbage, not wasm").unwrap_err().0.contains("not a WebAssembly component"));
        assert!(sections(b"\0as").is_err());
        assert_eq!(sections(&COMPONENT_PREAMBLE).unwrap(), vec![]);
        let mut c = COMPONENT_PREAMBLE.to_vec();
        push_custom(&mut c, "name", b"0123456789");
        for cut in 9..c.len() {
            assert!(sections(&c[..cut]).is_err(), "cut at {cut}");
        }
        let mut liar = COMPONENT_PREAMBLE.to_vec();
        liar.extend_from_slice(&[0, 0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(sections(&liar).unwrap_err().0.contains("declares 4294967295 bytes but only 0 follow"));
        let mut long = COMPONENT_PREAMBLE.to_vec();
        long.extend_from_slice(&[0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00]);
        assert!(sections(&long).unwrap_err().0.contains("runs past five bytes"));
        let mut name_past = COMPONENT_PREAMBLE.to_vec();
        name_past.extend_from_slice(&[0, 2, 5, b'a']);
        assert!(sections(&name_past).unwrap_err().0.contains("runs past the section"));
        let mut not_utf8 = COMPONENT_PREAMBLE.to_vec();
        not_utf8.extend_from_slice(&[0, 3, 2, 0xff, 0xfe]);
        assert!(sections(&not_utf8).unwrap_err().0.contains("not UTF-8"));
    }

    #[test]
    fn leb128_lengths_round_trip() {
        for v in [0u64, 1, 127, 128, 300, 16_384, u32::MAX as u64] {
            let mut out = Vec::new();
            leb128(&mut out, v);
            let mut at = 0;
            assert_eq!(read_u32(&out, &mut at).unwrap(), v);
            assert_eq!(at, out.len());
        }
    }

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn any_bytes_after_a_preamble_are_read_or_refused_never_a_panic(tail in proptest::collection::vec(any::<u8>(), 0..256)) {
                let mut bytes = COMPONENT_PREAMBLE.to_vec();
                bytes.extend_from_slice(&tail);
                if let Ok(s) = sections(&bytes) {
                    for x in s {
                        prop_assert!(x.payload.end <= bytes.len() && x.start < x.payload.end.max(x.start + 1));
                    }
                }
            }
        }
    }
}
