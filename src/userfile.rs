//! Opening and reading the files a user names: the config, the web config
//! and the certificates it names, uprobe binaries.
//!
//! A path a user names may be anything: a FIFO (whose `open` waits for a
//! writer forever), a directory, a socket, a device, a sparse terabyte. Every
//! such file is opened here, with `O_NONBLOCK` so that a FIFO or a device
//! cannot stall the open, then checked with `fstat`: anything but a regular
//! file is refused with an error saying what it is, and so is a file larger
//! than the cap its caller gives. Reads stop one byte past the cap, so a file
//! that grows after the check cannot make cgperf read more.
//!
//! A path on a hung network file system can still block `open` itself, in
//! the kernel; that is why start-up, `cgperf check` and reloads read files
//! and build plans under [`crate::deadline`].

use std::fs::{File, FileType, Metadata};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Largest text file read (configs, web configs, certificates): real ones
/// are a few KiB, and the cap bounds the memory and parse time an
/// accidental or hostile file can cost.
pub const MAX_TEXT_BYTES: u64 = 1024 * 1024;

/// Largest uprobe binary. Binaries are never read whole: only their ELF
/// headers and symbol tables are (on demand, through
/// `object::ReadCache`), so memory follows the tables, which the file size
/// bounds. Binaries with debug information reach a few GiB; a larger file
/// is not a program to probe.
pub const MAX_BINARY_BYTES: u64 = 8 * 1024 * 1024 * 1024;

/// Opens `path` for reading without blocking, and refuses anything but a
/// regular file of at most `cap` bytes. The file returned reads normally
/// (blocking); errors do not repeat the path, which callers name.
pub fn open(path: &Path, cap: u64) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            // A socket cannot be opened: say so rather than "No such device".
            Some(libc::ENXIO) => match std::fs::metadata(path) {
                Ok(meta) if !meta.is_file() => not_regular(meta.file_type()),
                _ => e,
            },
            _ => e,
        })?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_regular(meta.file_type()));
    }
    if meta.len() > cap {
        return Err(too_large(cap));
    }
    // Reads of a regular file ignore O_NONBLOCK, but clear it so that the
    // descriptor is what every reader expects.
    // SAFETY: fcntl on a descriptor we own, with integer arguments.
    unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok(file)
}

/// A descriptor of the regular file at `path`, opened with `O_PATH`: it
/// names the file without opening it for I/O (no read permission needed,
/// never blocks on a FIFO or device), so that later opens through
/// `/proc/self/fd` reach this very file without looking `path` up again.
/// With the descriptor, the file's metadata.
pub fn hold(path: &Path) -> io::Result<(OwnedFd, Metadata)> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_regular(meta.file_type()));
    }
    Ok((file.into(), meta))
}

/// The contents of `path`, opened as [`open`] does, at most `cap` bytes.
pub fn read(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    let file = open(path, cap)?;
    let mut bytes = Vec::new();
    // One byte past the cap: a file that grew since `open` is caught
    // without trusting its size again.
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(too_large(cap));
    }
    Ok(bytes)
}

/// True when `e` is [`read`]'s or [`open`]'s refusal of a file over its cap.
pub fn is_too_large(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::FileTooLarge
}

fn not_regular(kind: FileType) -> io::Error {
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    };
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("it is {what}, not a regular file"),
    )
}

fn too_large(cap: u64) -> io::Error {
    let size = if cap >= 1 << 30 {
        format!("{} GiB", cap >> 30)
    } else if cap >= 1 << 20 {
        format!("{} MiB", cap >> 20)
    } else {
        format!("{} KiB", cap >> 10)
    };
    io::Error::new(
        io::ErrorKind::FileTooLarge,
        format!("it is larger than {size}"),
    )
}

/// Makes a FIFO named `fifo` in `dir` for tests, and returns its path.
#[cfg(test)]
pub(crate) fn test_fifo(dir: &Path) -> std::path::PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let fifo = dir.join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).expect("no NUL");
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    fifo
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_not_a_regular_file_without_blocking() {
        let dir = tempfile::tempdir().expect("temp dir");
        let fifo = test_fifo(dir.path());
        let e = read(&fifo, MAX_TEXT_BYTES).expect_err("a FIFO is refused");
        assert_eq!(
            e.to_string(),
            "it is a FIFO (named pipe), not a regular file"
        );
        let e = read(dir.path(), MAX_TEXT_BYTES).expect_err("a directory is refused");
        assert_eq!(e.to_string(), "it is a directory, not a regular file");
        let e = read(Path::new("/dev/null"), MAX_TEXT_BYTES).expect_err("a device");
        assert_eq!(
            e.to_string(),
            "it is a character device, not a regular file"
        );
        let sock = dir.path().join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
        let e = read(&sock, MAX_TEXT_BYTES).expect_err("a socket is refused");
        assert_eq!(e.to_string(), "it is a socket, not a regular file");
    }

    #[test]
    fn holds_only_regular_files_without_blocking() {
        let dir = tempfile::tempdir().expect("temp dir");
        let fifo = test_fifo(dir.path());
        let e = hold(&fifo).expect_err("a FIFO is refused");
        assert_eq!(
            e.to_string(),
            "it is a FIFO (named pipe), not a regular file"
        );
        let e = hold(dir.path()).expect_err("a directory is refused");
        assert_eq!(e.to_string(), "it is a directory, not a regular file");
        // The link reaches the held file, which reads through it.
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").expect("write");
        let (fd, meta) = hold(&path).expect("a regular file is held");
        assert_eq!(meta.len(), 1);
        let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
        assert_eq!(std::fs::read_link(&link).expect("the link"), path);
        assert_eq!(std::fs::read(&link).expect("read through the link"), b"x");
    }

    #[test]
    fn reads_at_most_the_cap() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"12345").expect("write");
        assert_eq!(read(&path, 5).expect("at the cap"), b"12345");
        let e = read(&path, 4).expect_err("over the cap");
        assert!(is_too_large(&e));
        // A sparse terabyte is refused from its size, never read.
        std::fs::File::create(&path)
            .and_then(|f| f.set_len(1 << 40))
            .expect("sparse file");
        let e = read(&path, MAX_TEXT_BYTES).expect_err("too large");
        assert_eq!(e.to_string(), "it is larger than 1 MiB");
    }
}
