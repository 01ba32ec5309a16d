//! Reading and writing a user's files from the command line, with caps that hold
//! for any kind of file.
//!
//! A size from the file system is only a hint: `/dev/zero`, a named pipe or a file
//! under `/proc` report 0 bytes and then never end, and a file can grow after it was
//! measured. So reads stop one byte past their cap, whatever the length said.

use std::io::Read;
use std::path::Path;

use crate::{Error, Result};

/// The bytes of `path`, or an error: `check` is asked about the length the file
/// system reports (so an oversized regular file is refused before it is read), then
/// about the bytes actually read, which stop at `max + 1`. `check` must refuse
/// anything above `max`; `cannot` words an I/O error.
pub fn read_capped(
    path: &Path,
    max: u64,
    check: impl Fn(u64) -> Result<()>,
    cannot: impl Fn(std::io::Error) -> Error,
) -> Result<Vec<u8>> {
    check(std::fs::metadata(path).map_err(&cannot)?.len())?;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(&cannot)?
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(&cannot)?;
    check(bytes.len() as u64)?;
    Ok(bytes)
}

/// An error now, rather than after a long run, when `path` cannot be written: its
/// folder is missing or read-only, or it is a folder. Creates and removes
/// `path` + `.partial`, the temporary name writers here use beside their target.
pub fn check_writable(path: &Path, what: &str) -> Result<()> {
    let cannot = |e: std::io::Error| {
        Error::Config(format!("cannot write the {what} {}: {e}", path.display()))
    };
    if path.is_dir() {
        return Err(Error::Config(format!(
            "cannot write the {what} {}: it is a folder; give a file name",
            path.display()
        )));
    }
    let probe = partial_path(path);
    std::fs::File::create(&probe).map_err(cannot)?;
    std::fs::remove_file(&probe).map_err(cannot)
}

/// `path` + `.partial`: where a file is written before it is renamed over `path`, so
/// that an interrupted write never leaves a truncated file behind.
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

    fn io(e: std::io::Error) -> Error {
        Error::Config(e.to_string())
    }

    #[test]
    fn a_stream_without_a_length_stops_at_the_cap() {
        // /dev/zero reports 0 bytes and never ends: without the cap this never returns.
        let err = read_capped(Path::new("/dev/zero"), 1 << 20, at_most(1 << 20), io);
        assert_eq!(
            err.unwrap_err().to_string(),
            Error::Config(format!("{} > {}", (1 << 20) + 1, 1 << 20)).to_string()
        );
    }

    #[test]
    fn a_file_within_the_cap_is_read_whole_and_one_above_is_refused_unread() {
        let dir = std::env::temp_dir().join(format!("tidepool-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ten");
        std::fs::write(&file, b"0123456789").unwrap();
        assert_eq!(
            read_capped(&file, 10, at_most(10), io).unwrap(),
            b"0123456789"
        );
        let refused = read_capped(&file, 9, at_most(9), io)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("10 > 9"), "{refused}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn writability_is_checked_without_leaving_anything_behind() {
        let dir = std::env::temp_dir().join(format!("tidepool-write-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("out.json");
        check_writable(&target, "trace").unwrap();
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "the probe is removed"
        );
        let missing = check_writable(&dir.join("no/such/folder.json"), "trace").unwrap_err();
        assert!(
            missing.to_string().contains("cannot write the trace"),
            "{missing}"
        );
        let folder = check_writable(&dir, "checkpoint").unwrap_err();
        assert!(folder.to_string().contains("it is a folder"), "{folder}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
