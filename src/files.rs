//! Reading and writing a user's files from the command line, with caps that hold
//! for any kind of file.
//!
//! A size from the file system is only a hint: `/dev/zero`, a named pipe or a file
//! under `/proc` report 0 bytes and then never end, and a file can grow after it was
//! measured. So reads stop one byte past their cap, whatever the length said, and a
//! named pipe is opened without waiting for a writer (one with none reads as empty).
//!
//! Writes go to a temporary file renamed over the target, and only onto a regular
//! file: a device, pipe or socket at the path is refused (a rename would replace
//! it: `--save /dev/null` as root would replace the system's /dev/null), and a
//! symbolic link is written through (the file it names is replaced; the link
//! stays).

use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// The error for `path` (a `what`: checkpoint, corpus, trace) that could not be
/// read or written (`verb`), in a user's words:
/// `cannot read checkpoint run.safetensors: no such file`.
pub fn cannot(verb: &str, what: &str, path: &Path, e: &std::io::Error) -> Error {
    Error::File(format!(
        "cannot {verb} {what} {}: {}",
        path.display(),
        why(verb, e)
    ))
}

/// Why an I/O operation failed, without the OS's error number. A missing path
/// means a missing file when reading and a missing folder when writing.
fn why(verb: &str, e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::NotFound if verb == "write" => "no such folder".into(),
        ErrorKind::NotFound => "no such file".into(),
        ErrorKind::PermissionDenied => "permission denied".into(),
        ErrorKind::IsADirectory => "it is a folder; give a file name".into(),
        ErrorKind::NotADirectory => "a part of its path is a file, not a folder".into(),
        ErrorKind::ReadOnlyFilesystem => "the file system is read-only".into(),
        ErrorKind::StorageFull => "the disk is full".into(),
        _ => {
            // "Text of the error (os error 5)" -> "text of the error"
            let text = e.to_string();
            let text = match text.rfind(" (os error ") {
                Some(at) if text.ends_with(')') => text[..at].to_string(),
                _ => text,
            };
            let mut chars = text.chars();
            match chars.next() {
                Some(first) => first.to_lowercase().chain(chars).collect(),
                None => "an I/O error".into(),
            }
        }
    }
}

/// `path` (a `what`, named in errors) opened for reading, with the length its
/// file system reports (a hint: see the module's docs). A named pipe with no writer
/// opens at once and reads as empty, instead of blocking until one comes; a folder
/// is refused.
pub fn open_read(path: &Path, what: &str) -> Result<(std::fs::File, u64)> {
    let cannot = |e: std::io::Error| cannot("read", what, path, &e);
    let file = open_without_waiting(path).map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    if meta.is_dir() {
        return Err(cannot(ErrorKind::IsADirectory.into()));
    }
    Ok((file, meta.len()))
}

#[cfg(unix)]
fn open_without_waiting(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    // Reads block again once it is open: a pipe whose writer is slow is waited for
    // (its reads are bounded by the caller's cap), not read as ended.
    // SAFETY: fcntl on a descriptor this function owns, with integer arguments.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    if flags < 0
        || unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

#[cfg(not(unix))]
fn open_without_waiting(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::open(path)
}

/// The bytes of `path` (a `what`, named in errors), or an error: `check` is asked
/// about the length the file system reports (so an oversized regular file is
/// refused before it is read), then about the bytes actually read, which stop at
/// `max + 1`. `check` must refuse anything above `max`.
pub fn read_capped(
    path: &Path,
    what: &str,
    max: u64,
    check: impl Fn(u64) -> Result<()>,
) -> Result<Vec<u8>> {
    let (file, len) = open_read(path, what)?;
    check(len)?;
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| cannot("read", what, path, &e))?;
    check(bytes.len() as u64)?;
    Ok(bytes)
}

/// The file a write to `path` replaces: `path` itself when it is a regular file or
/// does not exist yet, the file a symbolic link at `path` names (so the link
/// stays); an error for a folder, a device, a named pipe, a socket, or a link to
/// anything but a regular file.
fn write_target(path: &Path, what: &str) -> Result<PathBuf> {
    let cannot = |e: std::io::Error| cannot("write", what, path, &e);
    let meta = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(path.to_path_buf()),
        Err(e) => return Err(cannot(e)),
        Ok(meta) => meta,
    };
    let (target, meta) = if meta.file_type().is_symlink() {
        let target = std::fs::canonicalize(path).map_err(|_| {
            Error::File(format!(
                "cannot write {what} {}: it is a symbolic link to a file that does not \
                 exist; give the path of a file",
                path.display()
            ))
        })?;
        let meta = std::fs::metadata(&target).map_err(cannot)?;
        (target, meta)
    } else {
        (path.to_path_buf(), meta)
    };
    if meta.is_dir() {
        return Err(cannot(ErrorKind::IsADirectory.into()));
    }
    if !meta.is_file() {
        return Err(Error::File(format!(
            "cannot write {what} {}: it is not a regular file (a device, a named pipe or a \
             socket), which writing would replace; give the path of a file",
            path.display()
        )));
    }
    Ok(target)
}

/// Writes `bytes` to `path` (a `what`, named in errors) whole or not at all: to a
/// temporary file beside it ([`partial_path`]), then renamed over it, so that an
/// interrupted write never leaves a truncated file behind. Only onto a regular file
/// (a symbolic link is written through): see the module's docs.
pub fn write_whole(path: &Path, what: &str, bytes: &[u8]) -> Result<()> {
    let target = write_target(path, what)?;
    let tmp = partial_path(&target);
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, &target))
        .map_err(|e| {
            std::fs::remove_file(&tmp).ok();
            cannot("write", what, path, &e)
        })
}

/// An error now, rather than after a long run, when `path` cannot be written: its
/// folder is missing or read-only, or it is not a regular file. Creates and removes
/// the `.partial` file [`write_whole`] writes beside its target.
pub fn check_writable(path: &Path, what: &str) -> Result<()> {
    let cannot = |e: std::io::Error| cannot("write", what, path, &e);
    let probe = partial_path(&write_target(path, what)?);
    std::fs::File::create(&probe).map_err(cannot)?;
    std::fs::remove_file(&probe).map_err(cannot)
}

/// `path` + `.partial`: where [`write_whole`] writes a file before it is renamed
/// over `path`.
pub fn partial_path(path: &Path) -> std::path::PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    tmp.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_most(max: u64) -> impl Fn(u64) -> Result<()> {
        move |n| {
            if n > max {
                Err(Error::Config(format!("{n} > {max}")))
            } else {
                Ok(())
            }
        }
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("tidepool-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_stream_without_a_length_stops_at_the_cap() {
        // /dev/zero reports 0 bytes and never ends: without the cap this never returns.
        let err = read_capped(Path::new("/dev/zero"), "corpus", 1 << 20, at_most(1 << 20));
        assert_eq!(
            err.unwrap_err(),
            Error::Config(format!("{} > {}", (1 << 20) + 1, 1 << 20))
        );
    }

    #[test]
    fn a_file_within_the_cap_is_read_whole_and_one_above_is_refused_unread() {
        let dir = scratch("files");
        let file = dir.join("ten");
        std::fs::write(&file, b"0123456789").unwrap();
        assert_eq!(
            read_capped(&file, "corpus", 10, at_most(10)).unwrap(),
            b"0123456789"
        );
        let refused = read_capped(&file, "corpus", 9, at_most(9))
            .unwrap_err()
            .to_string();
        assert!(refused.contains("10 > 9"), "{refused}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_that_cannot_be_read_is_named_with_what_it_is_for_and_why() {
        let dir = scratch("unread");
        let missing = dir.join("run.safetensors");
        let e = read_capped(&missing, "checkpoint", 10, at_most(10)).unwrap_err();
        assert_eq!(e.kind(), "file");
        let want = format!("cannot read checkpoint {}: no such file", missing.display());
        assert_eq!(e.to_string(), want);
        let folder = read_capped(&dir, "corpus", 1 << 20, at_most(1 << 20)).unwrap_err();
        let want = format!("cannot read corpus {}: it is a folder", dir.display());
        assert!(folder.to_string().starts_with(&want), "{folder}");
        assert!(!folder.to_string().contains("os error"), "{folder}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn writability_is_checked_without_leaving_anything_behind() {
        let dir = scratch("write");
        let target = dir.join("out.json");
        check_writable(&target, "trace").unwrap();
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "the probe is removed"
        );
        let deep = dir.join("no/such/folder.json");
        let missing = check_writable(&deep, "trace").unwrap_err();
        let want = format!("cannot write trace {}: no such folder", deep.display());
        assert_eq!(missing.to_string(), want);
        assert_eq!(missing.kind(), "file");
        let folder = check_writable(&dir, "checkpoint").unwrap_err();
        assert!(folder.to_string().contains("it is a folder"), "{folder}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_whole_write_replaces_the_file_and_a_failed_one_leaves_nothing() {
        let dir = scratch("whole");
        let target = dir.join("run.safetensors");
        std::fs::write(&target, b"old").unwrap();
        write_whole(&target, "checkpoint", b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        // Renaming a file over a folder fails after the temporary file was written.
        let folder = dir.join("taken");
        std::fs::create_dir(&folder).unwrap();
        let e = write_whole(&folder, "trace", b"x").unwrap_err();
        assert!(e.to_string().starts_with("cannot write trace"), "{e}");
        let mut left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, ["run.safetensors", "taken"], "no .partial left");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
