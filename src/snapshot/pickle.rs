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

mod op {
    pub const MARK: u8 = b'(';
    pub const STOP: u8 = b'.';
    pub const POP: u8 = b'0';
    pub const POP_MARK: u8 = b'1';
    pub const DUP: u8 = b'2';
    pub const BININT: u8 = b'J';
    pub const BININT1: u8 = b'K';
    pub const BININT2: u8 = b'M';
    pub const NONE: u8 = b'N';
    pub const BINUNICODE: u8 = b'X';
    pub const APPEND: u8 = b'a';
    pub const DICT: u8 = b'd';
    pub const EMPTY_DICT: u8 = b'}';
    pub const APPENDS: u8 = b'e';
    pub const BINGET: u8 = b'h';
    pub const LONG_BINGET: u8 = b'j';
    pub const LIST: u8 = b'l';
    pub const EMPTY_LIST: u8 = b']';
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const SETITEM: u8 = b's';
    pub const TUPLE: u8 = b't';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const SETITEMS: u8 = b'u';
    pub const BINFLOAT: u8 = b'G';
    pub const PROTO: u8 = 0x80;
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const TUPLE3: u8 = 0x87;
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const LONG1: u8 = 0x8a;
    pub const LONG4: u8 = 0x8b;
    pub const BINBYTES: u8 = b'B';
    pub const SHORT_BINBYTES: u8 = b'C';
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE8: u8 = 0x8d;
    pub const BINBYTES8: u8 = 0x8e;
    pub const MEMOIZE: u8 = 0x94;
    pub const FRAME: u8 = 0x95;
}

/// Why an opcode this reader does not run is refused.
fn refused(code: u8) -> Option<&'static str> {
    Some(match code {
        b'c' => "GLOBAL (imports a Python object)",
        0x93 => "STACK_GLOBAL (imports a Python object)",
        b'R' => "REDUCE (calls a Python object)",
        b'b' => "BUILD (sets an object's state)",
        b'i' => "INST (builds an object)",
        b'o' => "OBJ (builds an object)",
        0x81 => "NEWOBJ (builds an object)",
        0x92 => "NEWOBJ_EX (builds an object)",
        0x82..=0x84 => "EXT (imports a registered Python object)",
        b'P' | b'Q' => "PERSID (a persistent object)",
        0x8f..=0x91 => "a set (a snapshot holds none)",
        0x96..=0x98 => "a protocol 5 buffer (a snapshot holds none)",
        b'I' | b'L' | b'F' | b'S' | b'T' | b'U' | b'V' | b'g' | b'p' => {
            "a protocol 0 or 1 text opcode (snapshots are written with protocol 2 or later)"
        }
        _ => return None,
    })
}

struct Machine<'a> {
    input: &'a [u8],
    pos: usize,
    /// Where the current opcode began.
    at: usize,
    limits: Limits,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: Vec<Value>,
    out: Pickle<'a>,
    /// Values kept so far, against `limits.max_values`.
    kept: u64,
}

impl<'a> Pickle<'a> {
    /// Parses a whole pickle (one `STOP`, nothing after it).
    pub fn parse(input: &'a [u8], limits: Limits) -> Result<Pickle<'a>, PickleError> {
        if input.len() as u64 > limits.max_bytes {
            return Err(PickleError {
                at: 0,
                what: format!(
                    "the file is {} bytes; at most {} are read (Limits::max_bytes)",
                    input.len(),
                    limits.max_bytes
                ),
            });
        }
        // Indices into the input are u32.
        if input.len() > u32::MAX as usize {
            return Err(PickleError {
                at: 0,
                what: "files of 4 GiB and more are not read".into(),
            });
        }
        let mut m = Machine {
            input,
            pos: 0,
            at: 0,
            limits,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: Vec::new(),
            kept: 0,
            out: Pickle {
                input,
                root: Value::NONE,
                containers: Vec::new(),
                chunks: Vec::new(),
                items: Vec::new(),
                strings: Vec::new(),
                floats: Vec::new(),
                wide: Vec::new(),
            },
        };
        m.out.root = m.run()?;
        Ok(m.out)
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

impl<'a> Machine<'a> {
    fn fail<T>(&self, what: impl Into<String>) -> Result<T, PickleError> {
        Err(PickleError {
            at: self.at,
            what: what.into(),
        })
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], PickleError> {
        let left = (self.input.len() - self.pos) as u64;
        if n > left {
            return self.fail(format!(
                "{what} of {n} bytes, but the file has {left} left (truncated, or a bad length)"
            ));
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.input[start..self.pos])
    }

    fn byte(&mut self) -> Result<u8, PickleError> {
        Ok(self.take(1, "an argument")?[0])
    }

    fn le(&mut self, n: u64) -> Result<u64, PickleError> {
        let bytes = self.take(n, "an argument")?;
        Ok(bytes
            .iter()
            .rev()
            .fold(0u64, |acc, &b| acc << 8 | u64::from(b)))
    }

    /// Counts `n` more values kept against the limit.
    fn keep(&mut self, n: u64) -> Result<(), PickleError> {
        self.kept += n;
        if self.kept > self.limits.max_values {
            return self.fail(format!(
                "more than {} values (Limits::max_values)",
                self.limits.max_values
            ));
        }
        Ok(())
    }

    fn push(&mut self, v: Value) -> Result<(), PickleError> {
        // The stack counts against the values too: a file of pushes never popped.
        if self.stack.len() as u64 >= self.limits.max_values {
            return self.fail(format!(
                "more than {} values on the stack (Limits::max_values)",
                self.limits.max_values
            ));
        }
        self.stack.push(v);
        Ok(())
    }

    fn pop(&mut self) -> Result<Value, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return self.fail("the stack is empty here (a malformed pickle)");
        }
        Ok(self.stack.pop().unwrap_or(Value::NONE))
    }

    fn top(&self) -> Result<Value, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        match self.stack.len() > floor {
            true => Ok(self.stack[self.stack.len() - 1]),
            false => self.fail("the stack is empty here (a malformed pickle)"),
        }
    }

    /// Pops back to the last mark: the start of the values above it.
    fn pop_mark(&mut self) -> Result<usize, PickleError> {
        match self.marks.pop() {
            Some(m) => Ok(m),
            None => self.fail("no mark to pop back to (a malformed pickle)"),
        }
    }

    fn string(&mut self, tag: u64, n: u64, what: &str) -> Result<(), PickleError> {
        let start = self.pos as u32;
        let bytes = self.take(n, what)?;
        if tag == STR && std::str::from_utf8(bytes).is_err() {
            return self.fail("a string that is not UTF-8");
        }
        self.keep(1)?;
        let id = self.out.strings.len() as u64;
        self.out.strings.push((start, n as u32));
        self.push(Value::new(tag, id))
    }

    fn int(&mut self, v: i128) -> Result<(), PickleError> {
        if (i128::from(INLINE_MIN)..=i128::from(INLINE_MAX)).contains(&v) {
            let payload = ((v as i64) << TAG_BITS) as u64 >> TAG_BITS;
            return self.push(Value::new(INT, payload));
        }
        self.keep(1)?;
        let id = self.out.wide.len() as u64;
        self.out.wide.push(v);
        self.push(Value::new(WIDE, id))
    }

    /// A little-endian two's complement integer of `n` bytes (LONG1, LONG4).
    fn long(&mut self, n: u64) -> Result<(), PickleError> {
        if n > 16 {
            return self.fail(format!(
                "an integer of {n} bytes (at most 16 are read: no size or address needs more)"
            ));
        }
        let bytes = self.take(n, "an integer")?;
        let mut v: i128 = 0;
        for (i, &b) in bytes.iter().enumerate() {
            v |= i128::from(b) << (8 * i);
        }
        if n > 0 && n < 16 && bytes[n as usize - 1] & 0x80 != 0 {
            v -= 1i128 << (8 * n);
        }
        self.int(v)
    }

    fn container(&mut self, kind: Kind) -> Result<Value, PickleError> {
        self.keep(2)?;
        let id = self.out.containers.len() as u64;
        self.out.containers.push(Container {
            kind,
            len: 0,
            first: NO_CHUNK,
            last: NO_CHUNK,
        });
        Ok(Value::new(CONTAINER, id))
    }

    /// Appends `stack[from..]` to the container `target` and pops them.
    fn extend(&mut self, target: Value, from: usize) -> Result<(), PickleError> {
        let n = self.stack.len() - from;
        if n == 0 {
            return Ok(());
        }
        self.keep(n as u64 + 2)?;
        let c = target.index();
        let start = self.out.items.len() as u32;
        self.out.items.extend_from_slice(&self.stack[from..]);
        self.stack.truncate(from);
        let container = &mut self.out.containers[c];
        container.len = match container.len.checked_add(n as u32) {
            Some(len) => len,
            None => return self.fail("a container of more than 2^32 items"),
        };
        let last = container.last;
        if last != NO_CHUNK {
            let chunk = &mut self.out.chunks[last as usize];
            if chunk.start + chunk.len == start {
                chunk.len += n as u32;
                return Ok(());
            }
        }
        let id = self.out.chunks.len() as u32;
        self.out.chunks.push(Chunk {
            start,
            len: n as u32,
            next: NO_CHUNK,
        });
        let container = &mut self.out.containers[c];
        if last == NO_CHUNK {
            container.first = id;
        } else {
            self.out.chunks[last as usize].next = id;
        }
        container.last = id;
        Ok(())
    }

    /// The container under the values from `from` on, which must be a `kind`.
    fn target(&self, from: usize, kind: Kind, op: &str) -> Result<Value, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if from == 0 || from - 1 < floor {
            return self.fail(format!("{op} with nothing to add to (a malformed pickle)"));
        }
        let target = self.stack[from - 1];
        if target.tag() != CONTAINER || self.out.containers[target.index()].kind != kind {
            let found = self.out.get(target).type_name();
            return self.fail(format!("{op} onto {found}"));
        }
        Ok(target)
    }

    fn built(&mut self, kind: Kind, from: usize) -> Result<(), PickleError> {
        let c = self.container(kind)?;
        if kind == Kind::Dict && !(self.stack.len() - from).is_multiple_of(2) {
            return self.fail("a dict of an odd number of keys and values");
        }
        self.extend(c, from)?;
        self.push(c)
    }

    fn memo_put(&mut self, id: u64) -> Result<(), PickleError> {
        let v = self.top()?;
        let len = self.memo.len() as u64;
        if id < len {
            self.memo[id as usize] = v;
        } else if id == len {
            self.keep(1)?;
            self.memo.push(v);
        } else {
            return self.fail(format!(
                "memo slot {id} out of order (the next is {len}; a pickler numbers them in turn)"
            ));
        }
        Ok(())
    }

    fn memo_get(&mut self, id: u64) -> Result<(), PickleError> {
        match self.memo.get(id as usize) {
            Some(&v) => self.push(v),
            None => self.fail(format!("memo slot {id} was never stored")),
        }
    }

    fn run(&mut self) -> Result<Value, PickleError> {
        use op::*;
        loop {
            self.at = self.pos;
            if self.pos >= self.input.len() {
                return self.fail("the file ends before the pickle's STOP (truncated)");
            }
            let code = self.input[self.pos];
            self.pos += 1;
            match code {
                PROTO => {
                    let version = self.byte()?;
                    if !(2..=5).contains(&version) {
                        return self
                            .fail(format!("pickle protocol {version} (snapshots use 2 to 5)"));
                    }
                }
                FRAME => {
                    let n = self.le(8)?;
                    let left = (self.input.len() - self.pos) as u64;
                    if n > left {
                        return self.fail(format!(
                            "a frame of {n} bytes, but the file has {left} left (truncated)"
                        ));
                    }
                }
                STOP => {
                    let root = self.pop()?;
                    if !self.marks.is_empty() || !self.stack.is_empty() {
                        return self.fail("STOP with values left on the stack");
                    }
                    if self.pos != self.input.len() {
                        return self.fail(format!(
                            "{} bytes after the pickle's end",
                            self.input.len() - self.pos
                        ));
                    }
                    return Ok(root);
                }
                MARK => {
                    if self.marks.len() >= self.limits.max_depth {
                        return self.fail(format!(
                            "nested more than {} deep (Limits::max_depth)",
                            self.limits.max_depth
                        ));
                    }
                    self.marks.push(self.stack.len());
                }
                POP => {
                    // As Python's: with nothing above the last mark, the mark goes.
                    let floor = self.marks.last().copied().unwrap_or(0);
                    if self.stack.len() == floor && !self.marks.is_empty() {
                        self.marks.pop();
                    } else {
                        self.pop()?;
                    }
                }
                POP_MARK => {
                    let from = self.pop_mark()?;
                    self.stack.truncate(from);
                }
                DUP => {
                    let v = self.top()?;
                    self.push(v)?;
                }
                NONE => self.push(Value::NONE)?,
                NEWTRUE => self.push(Value::new(BOOL, 1))?,
                NEWFALSE => self.push(Value::new(BOOL, 0))?,
                BININT => {
                    let v = self.le(4)? as u32 as i32;
                    self.int(i128::from(v))?;
                }
                BININT1 => {
                    let v = self.byte()?;
                    self.int(i128::from(v))?;
                }
                BININT2 => {
                    let v = self.le(2)?;
                    self.int(i128::from(v))?;
                }
                LONG1 => {
                    let n = u64::from(self.byte()?);
                    self.long(n)?;
                }
                LONG4 => {
                    let n = self.le(4)? as u32 as i32;
                    if n < 0 {
                        return self.fail("an integer of negative length");
                    }
                    self.long(n as u64)?;
                }
                BINFLOAT => {
                    let bytes = self.take(8, "a float")?;
                    let mut be = [0u8; 8];
                    be.copy_from_slice(bytes);
                    self.keep(1)?;
                    let id = self.out.floats.len() as u64;
                    self.out.floats.push(f64::from_be_bytes(be));
                    self.push(Value::new(FLOAT, id))?;
                }
                SHORT_BINUNICODE => {
                    let n = u64::from(self.byte()?);
                    self.string(STR, n, "a string")?;
                }
                BINUNICODE => {
                    let n = self.le(4)?;
                    self.string(STR, n, "a string")?;
                }
                BINUNICODE8 => {
                    let n = self.le(8)?;
                    self.string(STR, n, "a string")?;
                }
                SHORT_BINBYTES => {
                    let n = u64::from(self.byte()?);
                    self.string(BYTES, n, "bytes")?;
                }
                BINBYTES => {
                    let n = self.le(4)?;
                    self.string(BYTES, n, "bytes")?;
                }
                BINBYTES8 => {
                    let n = self.le(8)?;
                    self.string(BYTES, n, "bytes")?;
                }
                EMPTY_LIST => {
                    let c = self.container(Kind::List)?;
                    self.push(c)?;
                }
                EMPTY_DICT => {
                    let c = self.container(Kind::Dict)?;
                    self.push(c)?;
                }
                EMPTY_TUPLE => {
                    let c = self.container(Kind::Tuple)?;
                    self.push(c)?;
                }
                TUPLE1 | TUPLE2 | TUPLE3 => {
                    let n = usize::from(code - TUPLE1 + 1);
                    let floor = self.marks.last().copied().unwrap_or(0);
                    if self.stack.len() < floor + n {
                        return self.fail("a tuple of values the stack does not hold");
                    }
                    let from = self.stack.len() - n;
                    self.built(Kind::Tuple, from)?;
                }
                TUPLE | LIST | DICT => {
                    let from = self.pop_mark()?;
                    let kind = match code {
                        TUPLE => Kind::Tuple,
                        LIST => Kind::List,
                        _ => Kind::Dict,
                    };
                    self.built(kind, from)?;
                }
                APPEND => {
                    let from = self.stack.len().saturating_sub(1);
                    self.top()?;
                    let target = self.target(from, Kind::List, "APPEND")?;
                    self.extend(target, from)?;
                }
                APPENDS => {
                    let from = self.pop_mark()?;
                    let target = self.target(from, Kind::List, "APPENDS")?;
                    self.extend(target, from)?;
                }
                SETITEM => {
                    let floor = self.marks.last().copied().unwrap_or(0);
                    if self.stack.len() < floor + 2 {
                        return self.fail("SETITEM without a key and a value");
                    }
                    let from = self.stack.len() - 2;
                    let target = self.target(from, Kind::Dict, "SETITEM")?;
                    self.extend(target, from)?;
                }
                SETITEMS => {
                    let from = self.pop_mark()?;
                    if !(self.stack.len() - from).is_multiple_of(2) {
                        return self.fail("SETITEMS of an odd number of keys and values");
                    }
                    let target = self.target(from, Kind::Dict, "SETITEMS")?;
                    self.extend(target, from)?;
                }
                MEMOIZE => {
                    let id = self.memo.len() as u64;
                    self.memo_put(id)?;
                }
                BINPUT => {
                    let id = u64::from(self.byte()?);
                    self.memo_put(id)?;
                }
                LONG_BINPUT => {
                    let id = self.le(4)?;
                    self.memo_put(id)?;
                }
                BINGET => {
                    let id = u64::from(self.byte()?);
                    self.memo_get(id)?;
                }
                LONG_BINGET => {
                    let id = self.le(4)?;
                    self.memo_get(id)?;
                }
                other => {
                    return match refused(other) {
                        Some(why) => self.fail(format!(
                            "opcode {why} refused: a memory snapshot holds only plain \
                             dicts, lists, strings and numbers"
                        )),
                        None => self.fail(format!("unknown opcode 0x{other:02x}")),
                    };
                }
            }
        }
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
