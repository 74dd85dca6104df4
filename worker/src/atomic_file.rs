//! Replacing a file atomically, so that a reader sees either the old slice or
//! the new one and never a torn mix of both.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Replaces `path` with `contents` atomically: write a temporary file in the
/// same directory, fsync it, rename it over `path`, then fsync the directory
/// so that the rename itself survives a crash.
///
/// The temporary file is named `.<file name>.tmp`, so a directory watcher of
/// the application can ignore dot-files. It is removed if any step fails.
pub fn replace_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let temp_path = temp_path_for(path)?;
    let written =
        write_and_sync(&temp_path, contents).and_then(|()| std::fs::rename(&temp_path, path));
    if let Err(error) = written {
        // Best effort: a leftover temporary file is harmless but untidy.
        let _ = std::fs::remove_file(&temp_path);
        return Err(error);
    }
    sync_parent_directory(path)
}

/// The temporary file beside `path` that [`replace_atomically`] writes first.
pub fn temp_path_for(path: &Path) -> io::Result<PathBuf> {
    let file_name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("slice file path {} has no file name", path.display()),
        )
    })?;
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(file_name);
    temp_name.push(".tmp");
    Ok(path.with_file_name(temp_name))
}

fn write_and_sync(temp_path: &Path, contents: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(temp_path)?;
    file.write_all(contents)?;
    file.sync_all()
}

fn sync_parent_directory(path: &Path) -> io::Result<()> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_file_gets_exactly_the_contents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("slice.yaml");
        replace_atomically(&path, b"jobs:\n- a\n").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"jobs:\n- a\n");
    }

    #[test]
    fn an_existing_file_is_replaced_by_a_new_inode_not_rewritten_in_place() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("slice.yaml");
        replace_atomically(&path, b"a much longer first version of the slice\n").unwrap();
        // A reader holding the old file open keeps reading the old version.
        let old_reader = std::fs::read_to_string(&path).unwrap();
        let held_open = File::open(&path).unwrap();
        let old_inode = std::fs::metadata(&path).unwrap().ino();

        replace_atomically(&path, b"short\n").unwrap();

        assert_eq!(std::fs::read(&path).unwrap(), b"short\n");
        assert_ne!(std::fs::metadata(&path).unwrap().ino(), old_inode);
        let still_old = io::read_to_string(held_open).unwrap();
        assert_eq!(still_old, old_reader);
    }

    #[test]
    fn no_temporary_file_is_left_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("slice.yaml");
        replace_atomically(&path, b"one\n").unwrap();
        replace_atomically(&path, b"two\n").unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec!["slice.yaml".to_string()]);
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("slice.yaml");
        replace_atomically(&path, b"good\n").unwrap();
        // A directory where the temporary file should go makes the write fail.
        std::fs::create_dir(temp_path_for(&path).unwrap()).unwrap();
        assert!(replace_atomically(&path, b"bad\n").is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"good\n");
    }

    #[test]
    fn a_path_without_a_file_name_is_refused_with_a_clear_error() {
        let error = replace_atomically(Path::new("/"), b"x").unwrap_err();
        assert!(error.to_string().contains("has no file name"), "{error}");
    }
}
