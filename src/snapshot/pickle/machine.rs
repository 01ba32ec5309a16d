//! The pickle machine, restricted: runs the opcodes a snapshot's plain values need,
//! refuses every other, and builds the [`Pickle`]'s arenas as it goes.

use super::*;

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

/// Runs the restricted machine over a whole pickle (one `STOP`, nothing after it).
pub(super) fn parse(input: &[u8], limits: Limits) -> Result<Pickle<'_>, PickleError> {
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
