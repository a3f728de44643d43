//! Owner-only files: the database directory (0700) and the database with its `-wal`,
//! `-shm` and `.lock` files (0600). Messages are application data; no other local user
//! reads them. The lock file ([`lock`]) keeps a second process off a database in use.

use std::path::Path;

use crate::SqliteError;

/// Mode of the directory holding the database.
pub(crate) const DIR_MODE: u32 = 0o700;
/// Mode of the database, WAL and shared-memory files.
pub(crate) const FILE_MODE: u32 = 0o600;

/// Creates `dir` and its missing parents with mode 0700. An existing directory open to
/// its group or others is tightened to 0700 (and logged), unless it is a shared directory
/// (sticky bit, as `/tmp`), which is left as it is with a warning.
#[cfg(unix)]
pub(crate) fn prepare_dir(dir: &Path) -> Result<(), SqliteError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let err = |source| SqliteError::CreateDir {
        path: dir.display().to_string(),
        source,
    };
    if !dir.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir)
            .map_err(err)?;
    }
    let mode = std::fs::metadata(dir).map_err(err)?.permissions().mode() & 0o7777;
    if mode & 0o077 == 0 {
        return Ok(());
    }
    if mode & 0o1000 != 0 {
        tracing::warn!(dir = %dir.display(), mode = format!("{mode:o}"),
            "the database directory is shared (sticky bit): its permissions are left as they are");
        return Ok(());
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE)).map_err(err)?;
    tracing::warn!(dir = %dir.display(), was = format!("{mode:o}"),
        "the database directory was open to other users: tightened to 700");
    Ok(())
}

/// Creates `dir` and its missing parents.
#[cfg(not(unix))]
pub(crate) fn prepare_dir(dir: &Path) -> Result<(), SqliteError> {
    std::fs::create_dir_all(dir).map_err(|source| SqliteError::CreateDir {
        path: dir.display().to_string(),
        source,
    })
}

/// Creates the database file (empty) with mode 0600 if it does not exist, so that it is
/// never readable by others, not even between its creation and [`restrict_files`].
#[cfg(unix)]
pub(crate) fn create_db_file(path: &Path) -> Result<(), SqliteError> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(SqliteError::Permissions {
            path: path.display().to_string(),
            source,
        }),
    }
}

/// Nothing to do off Unix.
#[cfg(not(unix))]
pub(crate) fn create_db_file(_path: &Path) -> Result<(), SqliteError> {
    Ok(())
}

/// Sets mode 0600 on the database and on its `-wal`, `-shm` and `.lock` files where they exist
/// (SQLite creates these with the database's mode; an older file may be wider).
#[cfg(unix)]
pub(crate) fn restrict_files(path: &Path) -> Result<(), SqliteError> {
    use std::os::unix::fs::PermissionsExt;
    let mut names = vec![path.to_path_buf()];
    for suffix in ["-wal", "-shm", ".lock"] {
        let mut s = path.as_os_str().to_owned();
        s.push(suffix);
        names.push(s.into());
    }
    for p in names {
        let mode = match std::fs::metadata(&p) {
            Ok(m) => m.permissions().mode() & 0o7777,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(SqliteError::Permissions {
                    path: p.display().to_string(),
                    source,
                });
            }
        };
        if mode & 0o077 != 0 {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(FILE_MODE)).map_err(
                |source| SqliteError::Permissions {
                    path: p.display().to_string(),
                    source,
                },
            )?;
            tracing::warn!(file = %p.display(), was = format!("{mode:o}"),
                "a database file was open to other users: tightened to 600");
        }
    }
    Ok(())
}

/// Nothing to do off Unix.
#[cfg(not(unix))]
pub(crate) fn restrict_files(_path: &Path) -> Result<(), SqliteError> {
    Ok(())
}

/// The lock file of the database at `path`: `<path>.lock`.
pub(crate) fn lock_path(path: &Path) -> std::path::PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".lock");
    s.into()
}

/// Takes the exclusive lock of the database at `path`: an advisory lock on its lock file
/// (created 0600 if missing), held as long as the returned file is open, and released by
/// the operating system when the process ends, however it ends. Refused with
/// [`SqliteError::InUse`] while another process (or another store of this one) holds it.
///
/// The store keeps message locks in memory and reads a crash from markers that the
/// process holding them removes (`crate::locks`), and it caches committed queue records:
/// both hold only while one process writes the file.
pub(crate) fn lock(path: &Path) -> Result<std::fs::File, SqliteError> {
    let lock = lock_path(path);
    let err = |source| SqliteError::LockFile {
        path: lock.display().to_string(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, FILE_MODE);
    let file = options.open(&lock).map_err(err)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(SqliteError::InUse {
            path: path.display().to_string(),
            lock: lock.display().to_string(),
        }),
        Err(std::fs::TryLockError::Error(source)) => Err(err(source)),
    }
}
