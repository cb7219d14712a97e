//! Byte-level damage: to model.json's text (then zipped normally) or to the finished .pt2.

use super::super::archive::zip_bytes;
use super::super::mutant::{Layout, Mutant};
use super::super::rng::Rng;

/// model.json's text gets one to four byte edits.
pub fn program_text(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let mut text = m.program_bytes();
    let edits: Vec<String> = (0..rng.range(1, 4)).map(|_| edit(&mut text, rng, Format::Json)).collect();
    m.program_text = Some(text);
    Some(format!("model.json bytes: {}", edits.join("; ")))
}

/// The zipped archive gets one to four byte edits.
pub fn archive(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let mut bytes = zip_bytes(&m.final_entries(), m.layout == Layout::ZipDeflated);
    if m.layout == Layout::Directory {
        m.layout = Layout::ZipStored;
    }
    let edits: Vec<String> = (0..rng.range(1, 4)).map(|_| edit(&mut bytes, rng, Format::Zip)).collect();
    m.archive_bytes = Some(bytes);
    Some(format!(".pt2 bytes: {}", edits.join("; ")))
}

#[derive(Clone, Copy, PartialEq)]
enum Format {
    Json,
    Zip,
}

/// One edit at a random place; returns what it did.
fn edit(bytes: &mut Vec<u8>, rng: &mut Rng, format: Format) -> String {
    let len = bytes.len();
    if len == 0 {
        bytes.extend(rng.bytes(16));
        return "16 random bytes into an empty file".into();
    }
    let at = rng.below(len);
    let span = rng.range(1, 64) as usize;
    let end = (at + span).min(len);
    match rng.below(8) {
        0 => {
            let bit = rng.below(8);
            bytes[at] ^= 1 << bit;
            format!("flipped bit {bit} of byte {at}")
        }
        1 => {
            let b = *rng.pick(b"\x00\xff\x7f\x80\"{[-9");
            bytes[at] = b;
            format!("byte {at} = {b:#04x}")
        }
        2 => {
            bytes.truncate(at);
            format!("truncated to {at} bytes")
        }
        3 => {
            let chunk = rng.bytes(span);
            bytes.splice(at..at, chunk);
            format!("inserted {span} random bytes at {at}")
        }
        4 => {
            bytes.drain(at..end);
            format!("deleted bytes {at}..{end}")
        }
        5 => {
            let chunk = bytes[at..end].to_vec();
            let to = rng.below(len);
            bytes.splice(to..to, chunk);
            format!("copied bytes {at}..{end} to {to}")
        }
        _ if format == Format::Json => replace_number(bytes, at, rng),
        _ => zip_field(bytes, at, rng),
    }
}

/// The first number at or after `at` becomes an edge value (or an unparseable one).
fn replace_number(bytes: &mut Vec<u8>, at: usize, rng: &mut Rng) -> String {
    let Some(start) = bytes[at..].iter().position(u8::is_ascii_digit).map(|p| p + at) else {
        return "no number to replace".into();
    };
    let end = bytes[start..].iter().position(|b| !b.is_ascii_digit()).map_or(bytes.len(), |p| p + start);
    let new = *rng.pick(&[
        "-1",
        "0",
        "99999999999999999999",
        "9223372036854775807",
        "-9223372036854775809",
        "1e400",
        "2147483648",
    ]);
    bytes.splice(start..end, new.bytes());
    format!("number at byte {start} -> {new}")
}

struct ZipRecord {
    name: &'static str,
    signature: &'static [u8],
    /// (offset from the signature, width) of its size, offset and count fields.
    fields: &'static [(usize, usize)],
}

const ZIP_RECORDS: &[ZipRecord] = &[
    ZipRecord { name: "local header", signature: b"PK\x03\x04", fields: &[(18, 4), (22, 4), (26, 2), (28, 2)] },
    ZipRecord {
        name: "central directory entry",
        signature: b"PK\x01\x02",
        fields: &[(20, 4), (24, 4), (28, 2), (30, 2), (42, 4)],
    },
    ZipRecord {
        name: "end of central directory",
        signature: b"PK\x05\x06",
        fields: &[(8, 2), (10, 2), (12, 4), (16, 4)],
    },
];

/// A size, offset or count field of the zip record nearest after `at` gets an edge value.
fn zip_field(bytes: &mut [u8], at: usize, rng: &mut Rng) -> String {
    let ZipRecord { name: record_name, signature, fields } = rng.pick(ZIP_RECORDS);
    let Some(record) = bytes
        .windows(4)
        .skip(at)
        .position(|w| w == *signature)
        .map(|p| p + at)
        .or_else(|| bytes.windows(4).position(|w| w == *signature))
    else {
        return "no zip record to damage".into();
    };
    let (offset, width) = *rng.pick(fields);
    let value: u32 = *rng.pick(&[0, 1, 0xffff_ffff, 0x7fff_ffff, 0x0001_0000]);
    let Some(field) = bytes.get_mut(record + offset..record + offset + width) else {
        return "zip record cut short".into();
    };
    field.copy_from_slice(&value.to_le_bytes()[..width]);
    format!("zip {record_name} at {record}: field +{offset} = {value:#x}")
}
