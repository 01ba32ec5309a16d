//! Checkpoint files on disk (native only: the wasm API takes bytes): read no
//! further than the format declares, written whole or not at all.

use std::io::Read;
use std::path::Path;

use super::{check_file_size, MAX_CHECKPOINT_BYTES};
use crate::error::{Error, Result};

/// Reads a checkpoint file, refusing one over [`MAX_CHECKPOINT_BYTES`]: before
/// reading it where the file system knows its length, else (a device, a pipe) by
/// the length its safetensors header declares, read first. So no more is read
/// than the header declares plus a byte (trailing bytes stay visible to
/// [`super::Checkpoint::from_bytes`]); what does not parse as a header is handed on as
/// read, for `from_bytes` to name what is wrong.
pub fn read_file(path: &Path) -> Result<Vec<u8>> {
    let (file, len) = crate::files::open_read(path, "checkpoint")?;
    check_file_size(len)?;
    let cannot = |e| crate::files::cannot("read", "checkpoint", path, &e);
    let mut file = file.take(MAX_CHECKPOINT_BYTES.saturating_add(1));
    let mut bytes = Vec::new();
    let mut read = |bytes: &mut Vec<u8>, n: u64| -> Result<bool> {
        let want = bytes.len() as u64 + n;
        (&mut file).take(n).read_to_end(bytes).map_err(cannot)?;
        Ok(bytes.len() as u64 == want)
    };
    // safetensors: a u64 (little-endian) header length, the JSON header, the data.
    if !read(&mut bytes, 8)? {
        return Ok(bytes);
    }
    let header = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    // A header past the cap is a damaged one (or not safetensors at all).
    if header > MAX_CHECKPOINT_BYTES - 8 || !read(&mut bytes, header)? {
        return Ok(bytes);
    }
    let Some(data) = declared_data_bytes(&bytes[8..]) else {
        return Ok(bytes);
    };
    let declared = (bytes.len() as u64).saturating_add(data);
    if declared > MAX_CHECKPOINT_BYTES {
        return Err(Error::TooLarge(format!(
            "the checkpoint's header declares {} ({declared} bytes); tidepool reads \
             checkpoints of at most {} (checkpoint::MAX_CHECKPOINT_BYTES)",
            crate::fmt_bytes(declared),
            crate::fmt_bytes(MAX_CHECKPOINT_BYTES)
        )));
    }
    read(&mut bytes, data + 1)?;
    Ok(bytes)
}

/// Bytes of tensor data a safetensors header (JSON) declares: the end of its last
/// tensor's `data_offsets`. `None` when it is not such a header.
fn declared_data_bytes(header: &[u8]) -> Option<u64> {
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(header).ok()?;
    let mut end = 0u64;
    for (name, entry) in &header {
        if name != "__metadata__" {
            end = end.max(entry.get("data_offsets")?.get(1)?.as_u64()?);
        }
    }
    Some(end)
}

/// Writes a checkpoint file whole or not at all (a temporary file beside it,
/// renamed over it), so an interrupted save never leaves a truncated checkpoint.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    crate::files::write_whole(path, "checkpoint", bytes)
}
