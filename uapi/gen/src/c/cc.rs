//! The confidential-session section of the C header (`uapi/src/cc.rs`):
//! the key exchange's sizes, labels, the vendor root key and the three
//! structs, kept apart from `c.rs` to keep files small.

use super::{item_key, module_key, Header};

/// The byte strings of the transcript and key schedule, by name.
const LABELS: [(&str, &[u8]); 8] = [
    ("CC_CERT_CONTEXT", gpupm_uapi::cc::CC_CERT_CONTEXT),
    ("CC_TRANSCRIPT_LABEL", gpupm_uapi::cc::CC_TRANSCRIPT_LABEL),
    ("CC_SIGNATURE_CONTEXT", gpupm_uapi::cc::CC_SIGNATURE_CONTEXT),
    ("CC_EXTRACT_SALT", gpupm_uapi::cc::CC_EXTRACT_SALT),
    ("CC_RSP_FINISHED_INFO", gpupm_uapi::cc::CC_RSP_FINISHED_INFO),
    ("CC_REQ_FINISHED_INFO", gpupm_uapi::cc::CC_REQ_FINISHED_INFO),
    ("CC_VM_KEY_INFO", gpupm_uapi::cc::CC_VM_KEY_INFO),
    ("CC_REPLACE_LABEL", gpupm_uapi::cc::CC_REPLACE_LABEL),
];

/// Sizes, magic numbers, labels, flags and the vendor root key.
pub(super) fn emit_cc(h: &mut Header) {
    h.section(
        "Confidential sessions: the key exchange (uapi/src/cc.rs, docs/confidential.md)",
        "",
    );
    group!(h, dec "GPUPM_", gpupm_uapi::cc: CC_NONCE_LEN, CC_SHARE_LEN, CC_PUBLIC_KEY_LEN,
        CC_SIGNATURE_LEN, CC_VERIFY_LEN, CC_SERIAL_LEN, CC_KEY_ID_LEN, CC_CERT_SIGNED_LEN,
        CC_CERT_VERSION, CC_ALG_ED25519);
    group!(h, hex "GPUPM_", gpupm_uapi::cc: CC_CERT_MAGIC);
    group!(h, hex "GPUPM_CC_FINISH_FLAGS_", gpupm_uapi::cc::finish_flags: REPLACE);
    for (name, bytes) in LABELS {
        let key = format!("cc::{name}");
        h.names.add(&key, &format!("GPUPM_{name}"));
        h.doc(&key);
        h.line(&format!(
            "#define GPUPM_{name} \"{}\" /* {} bytes, no NUL */",
            String::from_utf8_lossy(bytes),
            bytes.len()
        ));
    }
    h.names
        .add("cc::CC_VENDOR_ROOT_KEY", "GPUPM_CC_VENDOR_ROOT_KEY");
    h.doc("cc::CC_VENDOR_ROOT_KEY");
    let bytes: Vec<String> = gpupm_uapi::cc::CC_VENDOR_ROOT_KEY
        .iter()
        .map(|b| format!("{b:#04x}"))
        .collect();
    h.line(&format!(
        "#define GPUPM_CC_VENDOR_ROOT_KEY {{ {} }}",
        bytes.join(", ")
    ));
}

/// The certificate and the two messages.
pub(super) fn emit_cc_structs(h: &mut Header) {
    h.line("");
    h.structs_referring(&["DeviceCert", "KeyExchange", "Finish"], &[]);
}
