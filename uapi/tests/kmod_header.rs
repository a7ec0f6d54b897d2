//! The committed header of the perf PMU module (`kmod/gpupm_events.h`)
//! matches this crate: its event list, config fields and publication ABI.
//! The kernel build of the module (the guest lane, `tests/kernel`) checks
//! its `static_assert`s against the kernel's own types.

use gpupm_uapi_gen::kmod as gen_kmod;

use gpupm_uapi::events::CATALOGUE;

const REGEN: &str = "cargo run -p gpupm-uapi --example gen_kmod > kmod/gpupm_events.h";

#[test]
fn committed_kmod_header_matches_uapi() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../kmod/gpupm_events.h");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == gen_kmod::render(),
        "{path} is stale: run `{REGEN}`"
    );
}

#[test]
fn kmod_header_lists_every_event_once_by_id() {
    let header = gen_kmod::render();
    let listed: Vec<(u16, &str)> = header
        .lines()
        .filter_map(|l| l.trim().strip_prefix("X("))
        .filter_map(|l| {
            let mut parts = l.split(", ");
            Some((parts.next()?.parse().ok()?, parts.next()?))
        })
        .collect();
    let want: Vec<(u16, &str)> = CATALOGUE.iter().map(|e| (e.id, e.name)).collect();
    assert_eq!(listed, want);
}
