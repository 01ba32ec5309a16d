//! Text in, token ids out: a character tokenizer built from the corpus itself, the
//! train/held-out split, and the default corpus.
//!
//! The default corpus is Tiny Shakespeare (`data/tinyshakespeare.txt`, public
//! domain, 1.1 MB): fixed, so figures and samples do not move when the code does.
//! The native binary embeds it; the wasm build does not (it would double the
//! package), so the page fetches the same file and passes its text.

use std::collections::{BTreeSet, HashMap};

use crate::error::{Error, Result};

/// The default corpus, embedded in native builds.
#[cfg(not(target_arch = "wasm32"))]
pub const BUILTIN_CORPUS: &str = include_str!("../data/tinyshakespeare.txt");

/// Name of the default corpus (its file under `data/`).
pub const BUILTIN_NAME: &str = "tinyshakespeare.txt";

/// The largest corpus any entry point accepts (CLI file, page upload, URL, wasm
/// API), in bytes of UTF-8. Tokens take 4 bytes a character, so a corpus at the
/// cap needs about 5x its size in memory while it is tokenised.
pub const MAX_CORPUS_BYTES: u64 = 64 << 20;

/// An error unless a corpus of `bytes` bytes is within [`MAX_CORPUS_BYTES`].
pub fn check_corpus_size(name: &str, bytes: u64) -> Result<()> {
    if bytes > MAX_CORPUS_BYTES {
        return Err(Error::Data(format!(
            "{name} is {bytes} bytes ({}); the largest corpus accepted is {MAX_CORPUS_BYTES} \
             bytes ({}): use a shorter text",
            crate::fmt_bytes(bytes),
            crate::fmt_bytes(MAX_CORPUS_BYTES)
        )));
    }
    Ok(())
}

/// One token per distinct character of the corpus, in sorted order.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    chars: Vec<char>,
    ids: HashMap<char, u32>,
}

impl Tokenizer {
    pub fn from_text(text: &str) -> Self {
        // Inserted one by one: memory is the vocabulary's, not the text's
        // (`collect` into a BTreeSet first gathers every character in a Vec).
        let mut set = BTreeSet::new();
        for c in text.chars() {
            set.insert(c);
        }
        let chars: Vec<char> = set.into_iter().collect();
        let ids = chars
            .iter()
            .enumerate()
            .map(|(i, &c)| (c, i as u32))
            .collect();
        Tokenizer { chars, ids }
    }

    pub fn vocab_size(&self) -> usize {
        self.chars.len()
    }

    /// The characters in id order (sorted, distinct).
    pub fn chars(&self) -> &[char] {
        &self.chars
    }

    /// Ids of `text`'s characters; characters not in the vocabulary are skipped.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        text.chars()
            .filter_map(|c| self.ids.get(&c).copied())
            .collect()
    }

    pub fn decode(&self, ids: &[u32]) -> String {
        ids.iter()
            .filter_map(|&i| self.chars.get(i as usize))
            .collect()
    }
}

/// A tokenized corpus split 90/10 into training and held-out tokens.
#[derive(Clone, Debug)]
pub struct Corpus {
    pub name: String,
    pub bytes: usize,
    pub tokenizer: Tokenizer,
    pub train: Vec<u32>,
    pub val: Vec<u32>,
}

impl Corpus {
    /// The default corpus, Tiny Shakespeare, embedded in native builds.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn builtin() -> Self {
        Corpus::from_text(BUILTIN_NAME, BUILTIN_CORPUS).expect("the built-in corpus is valid")
    }

    /// Any UTF-8 text file. Rejects empty, binary and non-UTF-8 input with a message
    /// that says which.
    pub fn from_bytes(name: &str, bytes: &[u8]) -> Result<Self> {
        check_corpus_size(name, bytes.len() as u64)?;
        if bytes.is_empty() {
            return Err(Error::Data(format!("{name} is empty")));
        }
        let text = std::str::from_utf8(bytes).map_err(|e| {
            Error::Data(format!(
                "{name} is not UTF-8 text (invalid byte at offset {}); pick a plain text file",
                e.valid_up_to()
            ))
        })?;
        Corpus::from_text(name, text)
    }

    /// Any text up to [`MAX_CORPUS_BYTES`]; split into the first 90% of its tokens
    /// for training and the last 10% held out.
    pub fn from_text(name: &str, text: &str) -> Result<Self> {
        check_corpus_size(name, text.len() as u64)?;
        if text.trim().is_empty() {
            return Err(Error::Data(format!("{name} is empty")));
        }
        let chars = text.chars().count();
        let control = text
            .chars()
            .filter(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
            .count();
        if text.contains('\0') || control * 20 > chars {
            return Err(Error::Data(format!(
                "{name} looks binary ({control} control characters); pick a plain text file"
            )));
        }
        let tokenizer = Tokenizer::from_text(text);
        // One allocation of exactly the ids; the held-out tail is split off (a copy
        // of 10%), the training head keeps the allocation.
        let mut train = Vec::with_capacity(chars);
        train.extend(text.chars().map(|c| tokenizer.ids[&c]));
        let val = train.split_off(chars * 9 / 10);
        Ok(Corpus {
            name: name.to_string(),
            bytes: text.len(),
            train,
            val,
            tokenizer,
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.tokenizer.vocab_size()
    }

    pub fn tokens(&self) -> usize {
        self.train.len() + self.val.len()
    }

    /// Both splits must hold at least one window of `context + 1` tokens.
    pub fn check_context(&self, context: usize) -> Result<()> {
        let need = context + 1;
        if self.val.len() < need {
            return Err(Error::Data(format!(
                "{} has {} tokens, too short for a context of {context}: its held-out 10% \
                 needs at least {need}, so the corpus needs about {}",
                self.name,
                self.tokens(),
                need * 10
            )));
        }
        Ok(())
    }
}
