//! Tenant counter pages (`gpupm_uapi::page`, docs/pages.md): a VM's or a
//! live context's counters in a read-only shared page that `gpupmd` keeps
//! current, read without a system call.
//!
//! ```no_run
//! use gpupm_client::page::PageClient;
//!
//! let pages = PageClient::connect(gpupm_client::paths::DEFAULT_PAGES_SOCKET)?;
//! let vm1 = pages.map_vm(1)?;                   // one request, then memory reads
//! let c = vm1.read_counters()?;                 // consistent snapshot (sequence lock)
//! println!("generation {}: {} commits, last at cycle {}", c.generation, c.commit_seq, c.cycle);
//! # Ok::<(), gpupm_client::page::PageError>(())
//! ```
//!
//! [`CounterReader`] reads a scope through its page when the daemon offers
//! one and through the tenant node's ioctl otherwise (no page socket, a
//! refused or withdrawn page, a page that stays busy): what the `gpupm`
//! commands use.
//!
//! - [`PageClient`]: the page socket (requests, replies, descriptors);
//! - [`MappedPage`]: a read-only mapping and the sequence-lock reader;
//! - [`WritablePage`]: the writer, for the daemon (and tests);
//! - `seqlock`: both halves of the protocol; `sys`: the module's `unsafe`
//!   (mapping, unmapping, received descriptors).

mod mapping;
mod reader;
mod seqlock;
mod socket;
mod sys;

use std::io;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;

use gpupm_uapi::page::{PageCounters, PageData, PageHeader, PAGE_MAGIC, PAGE_SIZE, PAGE_VERSION};
use nix::errno::Errno;
use zerocopy::{FromZeros, IntoBytes};

use self::mapping::Mapping;

pub use self::reader::{CounterReader, Reading, Source, Target};
pub use self::seqlock::Busy;
pub use self::socket::{request, PageClient};

/// Why a page could not be had or read.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// The page socket could not be reached.
    #[error("cannot connect to the page socket {path}")]
    Connect {
        /// Socket path.
        path: PathBuf,
        /// Why.
        #[source]
        source: Errno,
    },
    /// Sending or receiving on the socket failed.
    #[error("the page socket failed")]
    Socket(#[source] Errno),
    /// The daemon closed the connection.
    #[error("the daemon closed the page socket")]
    Closed,
    /// The daemon answered something this client does not understand.
    #[error("the page socket answered {0}")]
    Protocol(&'static str),
    /// The daemon refused the page (its errno).
    #[error("the daemon refused the page")]
    Refused(#[source] Errno),
    /// The descriptor could not be mapped.
    #[error("cannot map the page")]
    Map(#[source] io::Error),
    /// The mapped file is not a page of this layout.
    #[error("the mapped file is not a gpupm page ({0})")]
    NotAPage(&'static str),
    /// The page stayed busy.
    #[error(transparent)]
    Busy(#[from] Busy),
}

impl PageError {
    /// The errno behind the failure, when there is one.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            PageError::Connect { source, .. } => Some(*source),
            PageError::Socket(e) | PageError::Refused(e) => Some(*e),
            PageError::Map(e) => e.raw_os_error().map(Errno::from_raw),
            _ => None,
        }
    }
}

fn header_of(map: &Mapping) -> PageHeader {
    let mut h = PageHeader::new_zeroed();
    seqlock::read_unlocked(map.words(), 0, h.as_mut_bytes());
    h
}

/// A consistent copy of everything the lock of `map`'s page protects.
fn data_of(map: &Mapping) -> Result<Box<PageData>, Busy> {
    let mut d = Box::new(PageData::new_zeroed());
    seqlock::read(map.words(), 0, &mut *d)?;
    Ok(d)
}

/// A page mapped read-only.
#[derive(Debug)]
pub struct MappedPage {
    map: Mapping,
    header: PageHeader,
}

impl MappedPage {
    /// Maps the page behind `fd` (`PROT_READ`, `MAP_SHARED`) and checks
    /// its header.
    pub fn from_fd(fd: BorrowedFd<'_>) -> Result<MappedPage, PageError> {
        let map = Mapping::map(fd, false).map_err(PageError::Map)?;
        let header = header_of(&map);
        if header.magic != PAGE_MAGIC {
            return Err(PageError::NotAPage("no page magic"));
        }
        if header.version != PAGE_VERSION {
            return Err(PageError::NotAPage("another page layout version"));
        }
        if usize::try_from(header.size).ok() != Some(PAGE_SIZE) {
            return Err(PageError::NotAPage("another page size"));
        }
        Ok(MappedPage { map, header })
    }

    /// What the page is about (immutable).
    pub fn header(&self) -> &PageHeader {
        &self.header
    }

    /// A consistent copy of the counters (totals, state, generation).
    pub fn read_counters(&self) -> Result<PageCounters, Busy> {
        let mut c = PageCounters::new_zeroed();
        self.read_counters_into(&mut c)?;
        Ok(c)
    }

    /// [`Self::read_counters`] into `out`; returns the sequence value.
    pub fn read_counters_into(&self, out: &mut PageCounters) -> Result<u64, Busy> {
        seqlock::read(self.map.words(), 0, out)
    }

    /// A consistent copy of everything the lock protects.
    pub fn read(&self) -> Result<Box<PageData>, Busy> {
        data_of(&self.map)
    }

    /// The sequence value now (odd while the daemon writes).
    pub fn seq(&self) -> u64 {
        seqlock::seq(self.map.words())
    }
}

/// A page mapped writable: the writer's side (one writer at a time).
#[derive(Debug)]
pub struct WritablePage {
    map: Mapping,
}

impl WritablePage {
    /// Maps the page file behind `fd`, opened for reading and writing and
    /// at least [`PAGE_SIZE`] long.
    pub fn map(fd: BorrowedFd<'_>) -> io::Result<WritablePage> {
        Ok(WritablePage {
            map: Mapping::map(fd, true)?,
        })
    }

    /// Writes the immutable header. Only for a page no reader can have
    /// yet: the header is not under the lock.
    pub fn init_header(&self, header: &PageHeader) {
        seqlock::write_unlocked(self.map.words(), 0, header.as_bytes());
    }

    /// The header as written.
    pub fn header(&self) -> PageHeader {
        header_of(&self.map)
    }

    /// Publishes `data` under the lock; returns the new (even) sequence.
    pub fn publish(&self, data: &PageData) -> u64 {
        seqlock::write(self.map.words(), 0, data)
    }

    /// Publishes only the counters (the rest of the data stays).
    pub fn publish_counters(&self, counters: &PageCounters) -> u64 {
        seqlock::write(self.map.words(), 0, counters)
    }

    /// What the page holds now (the writer reading its own page, or a
    /// page a previous writer left; `Busy` if that one died mid-update).
    pub fn read(&self) -> Result<Box<PageData>, Busy> {
        data_of(&self.map)
    }

    /// The sequence value now.
    pub fn seq(&self) -> u64 {
        seqlock::seq(self.map.words())
    }
}
