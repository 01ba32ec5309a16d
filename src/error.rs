//! One error type for the whole crate: every failure a user can cause or meet
//! (no GPU, a refused device, bad input, a lost device) becomes a message.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// The platform has no WebGPU / no usable adapter.
    NoAdapter(String),
    /// The adapter refused to create a device.
    RequestDevice(String),
    /// The device was lost (driver reset, browser tab backgrounded, GPU removed).
    DeviceLost(String),
    /// wgpu reported a validation or out-of-memory error.
    Gpu(String),
    /// A buffer could not be mapped for reading or writing.
    Map(String),
    /// Bad configuration or hyperparameters.
    Config(String),
    /// A bad corpus.
    Data(String),
    /// A file named on the command line could not be read or written, or is not
    /// the kind of file it should be (native only: the wasm API takes bytes, never
    /// paths). The message names the file, what it is for and why, e.g.
    /// `cannot read checkpoint run.safetensors: no such file`.
    File(String),
    /// The model or a buffer does not fit the device's limits.
    TooLarge(String),
    /// A trace or memory snapshot that cannot be read.
    Trace(String),
    /// A checkpoint that cannot be loaded: damaged, of another format, or holding
    /// values no run could have made.
    Checkpoint(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoAdapter(m) => write!(f, "no GPU adapter: {m}"),
            Error::RequestDevice(m) => write!(f, "the GPU refused a device: {m}"),
            Error::DeviceLost(m) => write!(f, "the GPU device was lost: {m}"),
            Error::Gpu(m) => write!(f, "GPU error: {m}"),
            Error::Map(m) => write!(f, "could not read a GPU buffer: {m}"),
            // Each names the setting it refuses, and a damaged checkpoint says so.
            Error::Config(m) => write!(f, "{m}"),
            Error::Data(m) => write!(f, "bad corpus: {m}"),
            Error::TooLarge(m) => write!(f, "too large for this device: {m}"),
            Error::File(m) => write!(f, "{m}"),
            Error::Trace(m) => write!(f, "bad trace: {m}"),
            // "bad checkpoint: ..." from the reader, after the file's name if any.
            Error::Checkpoint(m) => write!(f, "{m}"),
        }
    }
}

impl Error {
    /// The class of failure, for code that reacts to it (the page shows a different
    /// hint for each): `config`, `too_large`, `corpus`, `trace`, `no_webgpu`,
    /// `device_lost`, `internal`, or `file` (native only). JS errors from the wasm API
    /// carry it as `error.kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Config(_) => "config",
            Error::TooLarge(_) => "too_large",
            Error::Data(_) => "corpus",
            Error::File(_) => "file",
            Error::Trace(_) => "trace",
            Error::Checkpoint(_) => "checkpoint",
            Error::NoAdapter(_) | Error::RequestDevice(_) => "no_webgpu",
            Error::DeviceLost(_) => "device_lost",
            Error::Gpu(_) | Error::Map(_) => "internal",
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;
