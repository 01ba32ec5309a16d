//! Text in, token ids out: a character tokenizer built from the corpus itself, the
//! train/held-out split, and the corpus that ships inside the crate.

use std::collections::HashMap;

use crate::error::{Error, Result};

/// tidepool's own sources and docs, gathered at build time (build.rs): the app
/// trains with no download.
pub const BUILTIN_CORPUS: &str = include_str!(concat!(env!("OUT_DIR"), "/corpus.txt"));

/// One token per distinct character of the corpus, in sorted order.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    chars: Vec<char>,
    ids: HashMap<char, u32>,
}

impl Tokenizer {
    pub fn from_text(text: &str) -> Self {
        let mut chars: Vec<char> = text.chars().collect();
        chars.sort_unstable();
        chars.dedup();
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
    /// The corpus that ships inside the crate.
    pub fn builtin() -> Self {
        Corpus::from_text("tidepool sources (built in)", BUILTIN_CORPUS)
            .expect("the built-in corpus is valid")
    }

    /// Any UTF-8 text file. Rejects empty, binary and non-UTF-8 input with a message
    /// that says which.
    pub fn from_bytes(name: &str, bytes: &[u8]) -> Result<Self> {
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

    pub fn from_text(name: &str, text: &str) -> Result<Self> {
        if text.trim().is_empty() {
            return Err(Error::Data(format!("{name} is empty")));
        }
        let control = text
            .chars()
            .filter(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
            .count();
        if text.contains('\0') || control * 20 > text.chars().count() {
            return Err(Error::Data(format!(
                "{name} looks binary ({control} control characters); pick a plain text file"
            )));
        }
        let tokenizer = Tokenizer::from_text(text);
        let ids = tokenizer.encode(text);
        let split = ids.len() * 9 / 10;
        Ok(Corpus {
            name: name.to_string(),
            bytes: text.len(),
            train: ids[..split].to_vec(),
            val: ids[split..].to_vec(),
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
