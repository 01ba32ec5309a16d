//! A restricted reader of Python pickles: the plain values a PyTorch memory snapshot
//! holds (dicts, lists, tuples, strings, bytes, integers, floats, booleans, `None`)
//! and nothing else. No object is constructed and nothing is imported: the opcodes
//! that would (`GLOBAL`, `STACK_GLOBAL`, `REDUCE`, `BUILD`, `INST`, `OBJ`, `NEWOBJ`,
//! extensions, persistent ids) are refused, as are sets and out-of-band buffers.
//!
//! Why not the `serde-pickle` crate: it resolves each memo reference by cloning the
//! value, and a snapshot is mostly memo references (every event points at a stack
//! of frames written once), so a 100 MB snapshot expands many times over, and a
//! crafted file of references to references expands exponentially. It also turns
//! `GLOBAL`/`REDUCE`/`BUILD` into stand-ins instead of refusing them, builds a big
//! integer for every 64-bit address, and drops its value tree recursively (a deeply
//! nested file overflows the stack). Bounding that from outside would mean running
//! the pickle machine anyway, so this is that machine, restricted.
//!
//! Here values live in flat arenas and containers are referred to by index, so a
//! memo reference costs 8 bytes whatever it points at, nothing is recursive, and
//! strings are slices of the input. Every length is checked against the bytes left
//! before anything is read, and [`Limits`] caps the input, the values kept and the
//! nesting of marks. Every malformed file is a [`PickleError`] naming the byte.

use std::fmt;

mod machine;

/// How much a pickle may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest input, bytes.
    pub max_bytes: u64,
    /// Most values kept in all: container items, containers, strings, floats and
    /// the stack (8 to 16 bytes each). A PyTorch snapshot holds about one for every
    /// three bytes of file.
    pub max_values: u64,
    /// Most marks open at once (a snapshot nests six deep).
    pub max_depth: usize,
}

/// Largest snapshot read by default: a 100 MB snapshot (a few hundred thousand
/// events) fits with room to spare.
pub const MAX_BYTES: u64 = 256 << 20;
/// Values kept by default: 512 MiB of arena at most, about three times what the
/// largest file [`MAX_BYTES`] allows needs.
pub const MAX_VALUES: u64 = 64 << 20;
/// Marks open at once by default.
pub const MAX_DEPTH: usize = 64;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: MAX_BYTES,
            max_values: MAX_VALUES,
            max_depth: MAX_DEPTH,
        }
    }
}

impl Limits {
    /// Limits for files of up to `max_bytes`: the values kept scaled with it from
    /// the defaults, the nesting as by default.
    pub fn for_bytes(max_bytes: u64) -> Limits {
        let values = u128::from(MAX_VALUES) * u128::from(max_bytes) / u128::from(MAX_BYTES);
        Limits {
            max_bytes,
            max_values: u64::try_from(values).unwrap_or(u64::MAX).max(1),
            max_depth: MAX_DEPTH,
        }
    }
}

/// What is wrong with a pickle, and at which byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PickleError {
    /// Byte offset of the opcode (or length) at fault.
    pub at: usize,
    pub what: String,
}

impl fmt::Display for PickleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "byte {}: {}", self.at, self.what)
    }
}

/// A value: a tag in the low 3 bits and a payload (an inline integer or an index
/// into one of the [`Pickle`]'s arenas) above.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Value(u64);

const TAG_BITS: u32 = 3;
const NONE: u64 = 0;
const BOOL: u64 = 1;
const INT: u64 = 2;
const WIDE: u64 = 3;
const FLOAT: u64 = 4;
const STR: u64 = 5;
const BYTES: u64 = 6;
const CONTAINER: u64 = 7;
/// Inline integers: 61 bits, signed.
const INLINE_MIN: i64 = -(1 << 60);
const INLINE_MAX: i64 = (1 << 60) - 1;

impl Value {
    const NONE: Value = Value(NONE);

    fn new(tag: u64, payload: u64) -> Value {
        Value(payload << TAG_BITS | tag)
    }
    fn tag(self) -> u64 {
        self.0 & ((1 << TAG_BITS) - 1)
    }
    fn index(self) -> usize {
        (self.0 >> TAG_BITS) as usize
    }
}

/// The kinds of container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    List,
    Tuple,
    Dict,
}

/// A value seen from outside.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Item<'a> {
    None,
    Bool(bool),
    Int(i128),
    Float(f64),
    /// A string and its id (equal strings written once share it).
    Str(&'a str, u32),
    Bytes(&'a [u8]),
    /// A list, tuple or dict and its id.
    Container(Kind, u32),
}

impl Item<'_> {
    /// What it is, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Item::None => "None",
            Item::Bool(_) => "a boolean",
            Item::Int(_) => "an integer",
            Item::Float(_) => "a float",
            Item::Str(..) => "a string",
            Item::Bytes(_) => "bytes",
            Item::Container(Kind::List, _) => "a list",
            Item::Container(Kind::Tuple, _) => "a tuple",
            Item::Container(Kind::Dict, _) => "a dict",
        }
    }
}

#[derive(Clone, Copy)]
struct Container {
    kind: Kind,
    /// Items (a dict's keys and values alternate).
    len: u32,
    /// First and last chunk, `NO_CHUNK` while empty.
    first: u32,
    last: u32,
}

/// A run of a container's items in `items`; items arrive in batches (`APPENDS`,
/// `SETITEMS`), each batch one chunk unless it continues the last.
#[derive(Clone, Copy)]
struct Chunk {
    start: u32,
    len: u32,
    next: u32,
}

const NO_CHUNK: u32 = u32::MAX;

/// A parsed pickle: its root value and the arenas behind it.
pub struct Pickle<'a> {
    input: &'a [u8],
    root: Value,
    containers: Vec<Container>,
    chunks: Vec<Chunk>,
    items: Vec<Value>,
    /// (start, length) of each string or bytes value in `input`.
    strings: Vec<(u32, u32)>,
    floats: Vec<f64>,
    /// Integers past 61 bits.
    wide: Vec<i128>,
}

impl<'a> Pickle<'a> {
    /// Parses a whole pickle (one `STOP`, nothing after it).
    pub fn parse(input: &'a [u8], limits: Limits) -> Result<Pickle<'a>, PickleError> {
        machine::parse(input, limits)
    }

    pub fn root(&self) -> Value {
        self.root
    }

    /// What `v` is.
    pub fn get(&self, v: Value) -> Item<'a> {
        match v.tag() {
            NONE => Item::None,
            BOOL => Item::Bool(v.index() != 0),
            INT => Item::Int(i128::from((v.0 as i64) >> TAG_BITS)),
            WIDE => Item::Int(self.wide[v.index()]),
            FLOAT => Item::Float(self.floats[v.index()]),
            STR | BYTES => {
                let (start, len) = self.strings[v.index()];
                let bytes = &self.input[start as usize..(start + len) as usize];
                if v.tag() == BYTES {
                    Item::Bytes(bytes)
                } else {
                    // Checked when read.
                    Item::Str(std::str::from_utf8(bytes).unwrap_or(""), v.index() as u32)
                }
            }
            _ => {
                let i = v.index();
                Item::Container(self.containers[i].kind, i as u32)
            }
        }
    }

    /// The id of a string value (equal strings a pickler memoised share it),
    /// without decoding it: for readers that keep what each string means by id.
    pub fn string_id(&self, v: Value) -> Option<u32> {
        (v.tag() == STR).then_some(v.index() as u32)
    }

    /// The string of an id from [`Pickle::string_id`].
    pub fn string(&self, id: u32) -> &'a str {
        let (start, len) = self.strings[id as usize];
        std::str::from_utf8(&self.input[start as usize..(start + len) as usize]).unwrap_or("")
    }

    /// Items of a container in order (a dict's keys and values alternate).
    pub fn items(&self, container: u32) -> Items<'_, 'a> {
        let c = self.containers[container as usize];
        Items {
            pickle: self,
            chunk: c.first,
            at: 0,
            left: c.len,
        }
    }

    /// How many items a container holds (a dict: twice its entries).
    pub fn len(&self, container: u32) -> u32 {
        self.containers[container as usize].len
    }

    /// How many strings and containers the pickle holds: their ids are below.
    pub fn counts(&self) -> (usize, usize) {
        (self.strings.len(), self.containers.len())
    }

    /// A dict's (key, value) pairs.
    pub fn pairs(&self, dict: u32) -> Pairs<'_, 'a> {
        Pairs(self.items(dict))
    }
}

/// See [`Pickle::items`].
pub struct Items<'p, 'a> {
    pickle: &'p Pickle<'a>,
    chunk: u32,
    at: u32,
    left: u32,
}

impl Iterator for Items<'_, '_> {
    type Item = Value;
    fn next(&mut self) -> Option<Value> {
        while self.left > 0 {
            let c = self.pickle.chunks[self.chunk as usize];
            if self.at < c.len {
                let v = self.pickle.items[(c.start + self.at) as usize];
                self.at += 1;
                self.left -= 1;
                return Some(v);
            }
            self.chunk = c.next;
            self.at = 0;
        }
        None
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

/// See [`Pickle::pairs`].
pub struct Pairs<'p, 'a>(Items<'p, 'a>);

impl Iterator for Pairs<'_, '_> {
    type Item = (Value, Value);
    fn next(&mut self) -> Option<(Value, Value)> {
        let k = self.0.next()?;
        let v = self.0.next()?;
        Some((k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<Pickle<'_>, PickleError> {
        Pickle::parse(bytes, Limits::default())
    }

    // pickle.dumps({'a': [1, -2, 2**40, 'x']}, protocol=4)
    const SMALL: &[u8] = b"\x80\x04\x95\x1f\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94]\x94(K\x01J\xfe\xff\xff\xff\x8a\x06\x00\x00\x00\x00\x00\x01\x8c\x01x\x94es.";

    #[test]
    fn reads_plain_values() {
        let p = parse(SMALL).unwrap();
        let Item::Container(Kind::Dict, d) = p.get(p.root()) else {
            panic!("a dict")
        };
        let (k, v) = p.pairs(d).next().unwrap();
        assert!(matches!(p.get(k), Item::Str("a", _)));
        let Item::Container(Kind::List, l) = p.get(v) else {
            panic!("a list")
        };
        let items: Vec<_> = p.items(l).map(|v| p.get(v)).collect();
        assert_eq!(items[0], Item::Int(1));
        assert_eq!(items[1], Item::Int(-2));
        assert_eq!(items[2], Item::Int(1 << 40));
        assert!(matches!(items[3], Item::Str("x", _)));
    }

    #[test]
    fn every_truncation_is_an_error() {
        for n in 0..SMALL.len() {
            assert!(parse(&SMALL[..n]).is_err(), "{n} bytes");
        }
    }

    #[test]
    fn wide_integers() {
        // pickle.dumps((2**64 - 1, -(2**62)), protocol=4): LONG1 of 9 and 8 bytes.
        let bytes = b"\x80\x04\x95\x18\x00\x00\x00\x00\x00\x00\x00\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00\x8a\x08\x00\x00\x00\x00\x00\x00\x00\xc0\x86\x94.";
        let p = parse(bytes).unwrap();
        let Item::Container(Kind::Tuple, t) = p.get(p.root()) else {
            panic!()
        };
        let v: Vec<_> = p.items(t).map(|v| p.get(v)).collect();
        assert_eq!(v, vec![Item::Int(u64::MAX as i128), Item::Int(-(1 << 62))]);
    }
}
