//! Runtime-instrumentation sessions through the tenant node (ABI 1.7,
//! `gpupm_uapi::tenant::ri`): opening one, RIEMIT, the status, and the
//! entries `read()` returns, parsed into report groups and halt markers.

use std::io::Read;

use gpupm_uapi::layout::ri_record;
use gpupm_uapi::tenant::ri::{ri_entry, OpenRi, RiEmit, RiGroupHeader, RiResume, RiStatus};
use gpupm_uapi::tenant::{
    TENANT_IOC_OPEN_RI, TENANT_IOC_RI_EMIT, TENANT_IOC_RI_RESUME, TENANT_IOC_RI_STATUS,
    TENANT_STRUCT_VERSION,
};
use zerocopy::FromBytes;

use crate::tenant::{ClientError, TenantClient};

/// Bytes one [`TenantClient::read_ri`] asks for: many groups of the
/// largest size.
pub const RI_READ_BYTES: usize = 64 * (32 + 4096);

/// One entry of an RI session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RiEntry {
    /// Its header.
    pub header: RiGroupHeader,
    /// The group's records (16 bytes each); empty for a halt marker.
    pub records: Vec<[u8; 16]>,
}

impl RiEntry {
    /// Whether it is a halt marker.
    pub fn is_halt(&self) -> bool {
        self.header.kind == ri_entry::HALT
    }

    /// Record type codes (`layout::ri_record`), in order.
    pub fn kinds(&self) -> Vec<u8> {
        self.records.iter().map(|r| r[0]).collect()
    }

    /// The values of the register emit records (RIEMIT), in order.
    pub fn emitted(&self) -> Vec<u64> {
        self.records
            .iter()
            .filter(|r| r[0] == ri_record::EMIT && r[1] == 0)
            .map(|r| u64::from_le_bytes(r[8..16].try_into().unwrap_or_default()))
            .collect()
    }
}

impl TenantClient {
    /// `TENANT_IOC_OPEN_RI`: makes this handle an RI session; answers the
    /// filled-in request.
    pub fn open_ri(&self, req: &OpenRi) -> Result<OpenRi, ClientError> {
        let mut arg = OpenRi {
            version: TENANT_STRUCT_VERSION,
            ..*req
        };
        self.call("open RI session", TENANT_IOC_OPEN_RI, &mut arg)?;
        Ok(arg)
    }

    /// `TENANT_IOC_RI_EMIT`: RIEMIT `value`.
    pub fn ri_emit(&self, value: u32) -> Result<(), ClientError> {
        let mut arg = RiEmit {
            version: TENANT_STRUCT_VERSION,
            value,
            reserved: 0,
        };
        self.call("RI emit", TENANT_IOC_RI_EMIT, &mut arg)
    }

    /// `TENANT_IOC_RI_STATUS`.
    pub fn ri_status(&self) -> Result<RiStatus, ClientError> {
        let mut arg = RiStatus {
            version: TENANT_STRUCT_VERSION,
            ..RiStatus::default()
        };
        self.call("RI status", TENANT_IOC_RI_STATUS, &mut arg)?;
        Ok(arg)
    }

    /// Re-enables the handle's halted RI session on the partition its VM
    /// runs on now (ABI 1.8); answers that partition.
    pub fn ri_resume(&self) -> Result<RiResume, ClientError> {
        let mut arg = RiResume {
            version: TENANT_STRUCT_VERSION,
            ..RiResume::default()
        };
        self.call("RI resume", TENANT_IOC_RI_RESUME, &mut arg)?;
        Ok(arg)
    }

    /// The entries one `read()` returns (empty at end of file; blocks on a
    /// blocking handle until one is queued).
    pub fn read_ri(&self) -> Result<Vec<RiEntry>, ClientError> {
        let mut buf = vec![0u8; RI_READ_BYTES];
        let n = self.file().read(&mut buf).map_err(ClientError::Read)?;
        parse_ri(buf.get(..n).unwrap_or_default())
    }
}

/// Parses the entries of one `read()`.
pub fn parse_ri(mut bytes: &[u8]) -> Result<Vec<RiEntry>, ClientError> {
    let total = bytes.len();
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let bad = || ClientError::PartialRecord(total);
        let (header, _) = RiGroupHeader::read_from_prefix(bytes).map_err(|_| bad())?;
        let body = bytes
            .get(size_of::<RiGroupHeader>()..header.size as usize)
            .ok_or_else(bad)?;
        let records = <[[u8; 16]]>::ref_from_bytes(body).map_err(|_| bad())?;
        out.push(RiEntry {
            header,
            records: records.to_vec(),
        });
        bytes = &bytes[header.size as usize..];
    }
    Ok(out)
}
