//! The pages directory: the socket, and a private `store/` subdirectory
//! holding one file per page and the daemon generation. Files outlive the
//! daemon (the directory is on a tmpfs, `/run`), so mappings survive a
//! restart or kill -9 and the next daemon finds and rewrites the same
//! pages.
//!
//! `store/` is mode 0700 and owned by the daemon's user: nobody else can
//! open, create, rename or remove a page file by name; tenants get
//! read-only descriptors through the socket only. Page files are 0600:
//! reopening a received descriptor through `/proc/self/fd` for writing
//! checks these permissions and fails for anyone but the daemon's user.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use gpupm_client::page::WritablePage;
use gpupm_uapi::page::{PageData, PageHeader, PAGE_SIZE};

use super::table::Key;

/// Name of the private subdirectory.
pub const STORE: &str = "store";
/// Name of the generation file in the store.
const GENERATION: &str = "generation";
/// Prefix of a page file being created.
const NEW_PREFIX: &str = ".new-";

/// Why the pages directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    /// A directory or file operation failed.
    #[error("{what} {path}")]
    Io {
        /// What was attempted.
        what: &'static str,
        /// On what.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The directory is not safe to use.
    #[error("{path} {why}")]
    Unsafe {
        /// Which directory.
        path: PathBuf,
        /// What is wrong with it.
        why: &'static str,
    },
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> DirError + 'a {
    move |source| DirError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// The open pages directory.
#[derive(Debug)]
pub struct PageDir {
    root: PathBuf,
    store: PathBuf,
}

impl PageDir {
    /// Opens (creating if needed) `root` (0755) and `root/store` (0700).
    /// Both must be real directories owned by this process's user and
    /// writable by nobody else.
    pub fn open(root: &Path) -> Result<PageDir, DirError> {
        let store = root.join(STORE);
        for (dir, mode) in [(root, 0o755), (store.as_path(), 0o700)] {
            match fs::DirBuilder::new().mode(mode).create(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_err("cannot create", dir)(e)),
            }
            let meta = fs::symlink_metadata(dir).map_err(io_err("cannot inspect", dir))?;
            let unsafe_dir = |why| DirError::Unsafe {
                path: dir.to_owned(),
                why,
            };
            if !meta.is_dir() {
                return Err(unsafe_dir("is not a directory"));
            }
            if meta.uid() != nix::unistd::geteuid().as_raw() {
                return Err(unsafe_dir("belongs to another user"));
            }
            if meta.mode() & 0o022 != 0 {
                return Err(unsafe_dir("is writable by others"));
            }
            if meta.mode() & 0o7777 != mode {
                fs::set_permissions(dir, fs::Permissions::from_mode(mode))
                    .map_err(io_err("cannot set the mode of", dir))?;
            }
        }
        Ok(PageDir {
            root: root.to_owned(),
            store,
        })
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, name: &str) -> PathBuf {
        self.store.join(name)
    }

    /// The next daemon generation: one more than any before, persisted
    /// before it is used.
    pub fn next_generation(&self) -> Result<u64, DirError> {
        let path = self.path(GENERATION);
        let mut text = String::new();
        match File::open(&path) {
            Ok(mut f) => {
                f.read_to_string(&mut text)
                    .map_err(io_err("cannot read", &path))?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("cannot open", &path)(e)),
        }
        let next = text.trim().parse::<u64>().unwrap_or(0).saturating_add(1);
        self.store_generation(next)?;
        Ok(next)
    }

    /// Persists `generation` (temporary file, rename).
    pub fn store_generation(&self, generation: u64) -> Result<(), DirError> {
        let path = self.path(GENERATION);
        let tmp = self.path(&format!("{NEW_PREFIX}{GENERATION}"));
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(io_err("cannot create", &tmp))?;
        f.write_all(format!("{generation}\n").as_bytes())
            .map_err(io_err("cannot write", &tmp))?;
        fs::rename(&tmp, &path).map_err(io_err("cannot rename", &tmp))
    }

    /// Page files a previous daemon left, mapped writable. Anything else
    /// in the store (a half-made file, a file of the wrong size or owner)
    /// is removed.
    pub fn scan(&self) -> Result<Vec<(Key, WritablePage)>, DirError> {
        let mut out = Vec::new();
        let entries = fs::read_dir(&self.store).map_err(io_err("cannot list", &self.store))?;
        for entry in entries {
            let entry = entry.map_err(io_err("cannot list", &self.store))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == GENERATION {
                continue;
            }
            match Key::parse(&name).map(|k| (k, self.open_writable(&name))) {
                Some((key, Ok(page))) => out.push((key, page)),
                _ => {
                    tracing::warn!(file = %name, "removing a stray file from the pages store");
                    self.remove_name(&name);
                }
            }
        }
        Ok(out)
    }

    fn open_writable(&self, name: &str) -> io::Result<WritablePage> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(self.path(name))?;
        let meta = f.metadata()?;
        let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_owned());
        if !meta.is_file() || meta.uid() != nix::unistd::geteuid().as_raw() {
            return Err(bad("not a page file of this user"));
        }
        if usize::try_from(meta.len()).ok() != Some(PAGE_SIZE) {
            return Err(bad("not one page long"));
        }
        WritablePage::map(std::os::fd::AsFd::as_fd(&f))
    }

    /// Creates the page file of `key` with `header` and `data` (written
    /// before the file has its name, so no reader ever sees it half made),
    /// replacing any file of that name.
    pub fn create(
        &self,
        key: Key,
        header: &PageHeader,
        data: &PageData,
    ) -> Result<WritablePage, DirError> {
        let name = key.file_name();
        let tmp = self.path(&format!("{NEW_PREFIX}{name}"));
        self.remove_name(&format!("{NEW_PREFIX}{name}"));
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(io_err("cannot create", &tmp))?;
        f.set_len(PAGE_SIZE as u64)
            .map_err(io_err("cannot size", &tmp))?;
        let page =
            WritablePage::map(std::os::fd::AsFd::as_fd(&f)).map_err(io_err("cannot map", &tmp))?;
        page.init_header(header);
        page.publish(data);
        let path = self.path(&name);
        fs::rename(&tmp, &path).map_err(io_err("cannot rename", &tmp))?;
        Ok(page)
    }

    /// A read-only descriptor of `key`'s page, for a client.
    pub fn open_read_only(&self, key: Key) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(self.path(&key.file_name()))
    }

    /// Removes `key`'s page file (mappings stay valid).
    pub fn remove(&self, key: Key) {
        self.remove_name(&key.file_name());
    }

    fn remove_name(&self, name: &str) {
        let path = self.path(name);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove a page file")
            }
        }
    }
}
