//! Sampling sessions from Rust: [`TenantClient::open_sampling`] and
//! [`TenantClient::read_samples`], and the parsing of what `read()`
//! returns into typed records.
//!
//! ```no_run
//! use gpupm_client::sampling::session::{SampleBody, SamplingRequest};
//! use gpupm_client::{Scope, TenantClient};
//!
//! let node = TenantClient::open_default()?;
//! let opened = node.open_sampling(&SamplingRequest::cycles(Scope::Ctx(3), 4096, 255))?;
//! println!("device period {}", opened.device_period);
//! for s in node.read_samples()? {
//!     if let SampleBody::Cycle(pc) = s.body {
//!         println!("kernel {} block {}", pc.kernel, pc.block);
//!     }
//! }
//! # Ok::<(), gpupm_client::ClientError>(())
//! ```

use std::io::Read;

use gpupm_uapi::sampling::{BranchStackRecord, PcRecord};
use gpupm_uapi::tenant::sampling::{sample_flags, sample_kind, OpenSampling, SampleHeader};
use gpupm_uapi::tenant::{TENANT_IOC_OPEN_SAMPLING, TENANT_STRUCT_VERSION};
use zerocopy::FromBytes;

use crate::tenant::{scope_code, ClientError, Scope, TenantClient};

/// What a session asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SamplingRequest {
    /// A context or a VM of the caller's.
    pub scope: Scope,
    /// Bits of `sample_kind`.
    pub kinds: u16,
    /// P (with cycle samples).
    pub period: u32,
    /// R_MAX (with cycle samples).
    pub dither: u32,
    /// N (with branch stacks).
    pub branch_every: u32,
    /// Records the daemon queues for the session (0 = its default).
    pub queue_records: u32,
}

impl SamplingRequest {
    /// Cycle samples every `period` + U(0..=`dither`) cycles.
    pub fn cycles(scope: Scope, period: u32, dither: u32) -> Self {
        SamplingRequest {
            scope,
            kinds: sample_kind::CYCLE,
            period,
            dither,
            branch_every: 0,
            queue_records: 0,
        }
    }

    /// Adds branch stacks captured every `n` taken branches.
    pub fn with_branches(mut self, n: u32) -> Self {
        self.kinds |= sample_kind::BRANCH_STACK;
        self.branch_every = n;
        self
    }
}

/// The body of one record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SampleBody {
    /// A branch stack.
    Branch(Box<BranchStackRecord>),
    /// A cycle sample.
    Cycle(PcRecord),
    /// A confidential VM's record: the device's whole slot (envelope,
    /// ciphertext, tag), to open with the VM's key.
    Sealed(Vec<u8>),
}

/// One record of a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Its header.
    pub header: SampleHeader,
    /// Its body.
    pub body: SampleBody,
}

/// Bytes one `read()` asks for: many records at once.
pub const READ_BYTES: usize = 256 << 10;

impl TenantClient {
    /// Makes this handle a sampling session; answers what the device runs.
    pub fn open_sampling(&self, req: &SamplingRequest) -> Result<OpenSampling, ClientError> {
        let (kind, id) = scope_code(req.scope);
        let mut arg = OpenSampling {
            version: TENANT_STRUCT_VERSION,
            scope: kind,
            id,
            kinds: u32::from(req.kinds),
            period: req.period,
            dither: req.dither,
            branch_every: req.branch_every,
            queue_records: req.queue_records,
            ..OpenSampling::default()
        };
        self.call(
            "TENANT_IOC_OPEN_SAMPLING",
            TENANT_IOC_OPEN_SAMPLING,
            &mut arg,
        )?;
        Ok(arg)
    }

    /// The records one `read()` returns (at least one; blocks on a
    /// blocking handle until one is queued).
    pub fn read_samples(&self) -> Result<Vec<Sample>, ClientError> {
        let mut buf = vec![0u8; READ_BYTES];
        let n = self.read_raw(&mut buf)?;
        parse_samples(buf.get(..n).unwrap_or_default())
    }

    /// One `read()` into `buf`: whole records, as the node encodes them.
    pub fn read_raw(&self, buf: &mut [u8]) -> Result<usize, ClientError> {
        let mut file = self.file();
        file.read(buf).map_err(ClientError::Read)
    }
}

/// Parses the records of one `read()`.
pub fn parse_samples(mut bytes: &[u8]) -> Result<Vec<Sample>, ClientError> {
    let total = bytes.len();
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let bad = ClientError::PartialRecord(total);
        let (header, _) = SampleHeader::read_from_prefix(bytes).map_err(|_| bad)?;
        let size = header.size as usize;
        let Some(payload) = bytes.get(size_of::<SampleHeader>()..size) else {
            return Err(ClientError::PartialRecord(total));
        };
        let body = if header.flags & sample_flags::SEALED != 0 {
            SampleBody::Sealed(payload.to_vec())
        } else {
            match header.kind {
                sample_kind::CYCLE => SampleBody::Cycle(
                    PcRecord::read_from_bytes(payload)
                        .map_err(|_| ClientError::PartialRecord(total))?,
                ),
                sample_kind::BRANCH_STACK => SampleBody::Branch(Box::new(
                    BranchStackRecord::read_from_bytes(payload)
                        .map_err(|_| ClientError::PartialRecord(total))?,
                )),
                _ => return Err(ClientError::PartialRecord(total)),
            }
        };
        out.push(Sample { header, body });
        bytes = &bytes[size..];
    }
    Ok(out)
}
