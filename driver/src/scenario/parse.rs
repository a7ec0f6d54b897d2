//! Scenario file parsing: TOML text to a located [`ScenarioError`] or a
//! resolved [`Scenario`]. The format is documented on the parent module.

use std::path::Path;

use super::error::{locate, ScenarioError, SpanError};
use super::spec::Scenario;
use super::validate;

/// Parses and validates scenario `text`; `source_name` names it in errors.
pub fn parse(source_name: &str, text: &str) -> Result<Scenario, ScenarioError> {
    let raw = toml::from_str(text).map_err(|e| {
        let lines = e.message().lines().map(str::trim).filter(|l| !l.is_empty());
        let reason = lines.collect::<Vec<_>>().join("; ");
        let span = e.span().unwrap_or(0..0);
        locate(source_name, text, &SpanError::new(span, reason))
    })?;
    validate::resolve(raw, &default_name(source_name)).map_err(|e| locate(source_name, text, &e))
}

/// Reads and parses the scenario file at `path`.
pub fn parse_file(path: &Path) -> Result<Scenario, ScenarioError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
        file: file.clone(),
        line: 0,
        column: 0,
        reason: format!("cannot read the scenario file: {e}"),
    })?;
    parse(&file, &text)
}

/// The scenario name used when the file gives none: the file name without
/// directory and extension.
fn default_name(source_name: &str) -> String {
    Path::new(source_name).file_stem().map_or_else(
        || source_name.to_owned(),
        |s| s.to_string_lossy().into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{parse, parse_file};
    use crate::scenario::test_support::{assert_at, err, err_raw, BASE};

    #[test]
    fn syntax_error_reports_line_and_column() {
        let e = err_raw("name = \"x\"\nseed = = 3\n");
        assert_eq!((e.file.as_str(), e.line, e.column), ("t.toml", 2, 8));
        assert!(!e.reason.is_empty());
    }

    #[test]
    fn unknown_top_level_key_is_rejected_with_line() {
        let e = err("name = \"x\"\nsed = 3\n");
        assert_at(&e, 2, "unknown field `sed`");
        assert_eq!(e.column, 1);
    }

    #[test]
    fn unknown_key_in_table_is_rejected_with_line() {
        let e = err("[trigger]\nperiod_us = 10\nperiod_ms = 1\n");
        assert_at(&e, 3, "unknown field `period_ms`");
    }

    #[test]
    fn wrong_type_is_rejected_with_line() {
        let e = err("[topology]\npcie = \"yes\"\n");
        assert_at(&e, 2, "invalid type");
    }

    #[test]
    fn negative_integer_is_rejected_with_line() {
        let e = err("[stream]\n\nring_records = -16\n");
        assert_at(&e, 3, "-16");
    }

    #[test]
    fn missing_required_key_is_reported() {
        let e = err_raw("[[partition]]\nslot = 1\ngpcs = [0]\n[[vm]]\nid = 1\npartition = 1\n");
        assert_at(&e, 1, "missing field `memory_slices`");
    }

    #[test]
    fn unreadable_file_reports_line_zero() {
        let path = Path::new("/nonexistent/gpupm/scenario.toml");
        let e = match parse_file(path) {
            Ok(s) => panic!("parsed {s:?}"),
            Err(e) => e,
        };
        assert_eq!((e.line, e.column), (0, 0));
        assert!(e.reason.starts_with("cannot read the scenario file"), "{e}");
        assert!(
            e.to_string()
                .starts_with("/nonexistent/gpupm/scenario.toml:0:0: "),
            "{e}"
        );
    }

    #[test]
    fn name_defaults_to_file_stem() {
        let s = parse("dir/demo.toml", BASE);
        assert_eq!(s.map(|s| s.name), Ok("demo".to_owned()));
    }
}

#[cfg(test)]
mod example_tests {
    use gpupm_uapi::identity::{DeviceUuid, PciAddress};

    use super::parse;
    use crate::scenario::program::{BlockSpec, Exit, KernelSpec, ProgramSpec};
    use crate::scenario::test_support::ok;
    use crate::scenario::{
        ChurnSpec, ClockSpec, ContextSpec, IdentitySpec, MigrationSpec, OobSpec, PartitionSpec,
        PhaseSpec, ProfileSpec, Scenario, StreamSpec, ThrottleWindow, TopologySpec, TriggerSpec,
        VmSpec,
    };

    #[test]
    fn documented_example_resolves_to_the_expected_scenario() {
        let text = include_str!("example.toml");
        let parsed = parse("example.toml", text);
        let block = |name: &str, instructions, cpi: Vec<f64>, throttle, exit| BlockSpec {
            name: name.into(),
            instructions,
            cpi,
            throttle,
            exit,
            marker: false,
            data: None,
        };
        let expected = Scenario {
            programs: vec![ProgramSpec {
                name: "tiles".into(),
                entry: 0,
                kernels: vec![
                    KernelSpec {
                        name: "main".into(),
                        blocks: vec![
                            block("head", 32, vec![1.5], 1.5, Exit::Fall),
                            block(
                                "b1",
                                128,
                                vec![1.1, 2.0],
                                1.0,
                                Exit::Loop { to: 0, trips: 64 },
                            ),
                            block("b2", 16, vec![3.0], 1.0, Exit::Call(1)),
                        ],
                    },
                    KernelSpec {
                        name: "store".into(),
                        blocks: vec![block(
                            "b0",
                            64,
                            vec![4.0],
                            1.0,
                            Exit::Branch(vec![(0, 0.25)]),
                        )],
                    },
                ],
            }],
            name: "example".into(),
            seed: 42,
            identity: IdentitySpec {
                index: 0,
                pci: PciAddress {
                    domain: 0,
                    bus: 0x18,
                    device: 0,
                    function: 0,
                },
                uuid: DeviceUuid([
                    0x6c, 0x1a, 0x5f, 0x0e, 0x93, 0xd2, 0x8b, 0x47, 0xa0, 0xf1, 0x2e, 0x5d, 0x7c,
                    0x9b, 0x4a, 0x38,
                ]),
                serial: "1652921000418".into(),
                model: "H100 SXM5 80GB".into(),
            },
            clock: ClockSpec {
                khz: 1_980_000,
                secondary_khz: 990_000,
            },
            topology: TopologySpec {
                sms_per_gpc: vec![17, 17, 17, 17, 16, 16, 16, 16],
                memory_slices: 8,
                l2_per_slice: 6,
                fb_per_slice: 2,
                ce_per_slice: 1,
                nvlinks: 18,
                pcie: true,
            },
            trigger: TriggerSpec {
                period_cycles: 1_980_000,
                dither: false,
                threshold: 268_434_944,
            },
            stream: StreamSpec {
                ring_records: 1024,
                watermark: 512,
            },
            switch_timeout_cycles: 3_960_000,
            partitions: vec![
                PartitionSpec {
                    slot: 1,
                    gpcs: vec![0, 1, 2, 3],
                    memory_slices: vec![0, 1, 2, 3],
                    ctx_timeslice_cycles: 3_960_000,
                    vm_timeslice_cycles: 7_920_000,
                    ri_version: 1,
                    ri_max_rgs: gpupm_uapi::ri::RGS_MAX,
                },
                PartitionSpec {
                    slot: 2,
                    gpcs: vec![4, 5, 6, 7],
                    memory_slices: vec![4, 5, 6, 7],
                    ctx_timeslice_cycles: 3_960_000,
                    vm_timeslice_cycles: 0,
                    ri_version: 1,
                    ri_max_rgs: gpupm_uapi::ri::RGS_MAX,
                },
            ],
            vms: vec![
                VmSpec {
                    id: 1,
                    partition: 1,
                    confidential: false,
                    confidential_key: None,
                },
                VmSpec {
                    id: 2,
                    partition: 2,
                    confidential: true,
                    confidential_key: None,
                },
            ],
            profiles: vec![
                ProfileSpec {
                    program: Some(0),
                    name: "gemm".into(),
                    phases: vec![
                        PhaseSpec {
                            duration_cycles: 990_000,
                            rates: vec![(0, 1.0), (4, 30.5)],
                        },
                        PhaseSpec {
                            duration_cycles: 99_000,
                            rates: vec![],
                        },
                    ],
                },
                ProfileSpec {
                    program: None,
                    name: "links".into(),
                    phases: vec![PhaseSpec {
                        duration_cycles: 100_000,
                        rates: vec![(36, 0.25), (37, 0.5)],
                    }],
                },
            ],
            device_profile: Some(1),
            contexts: vec![ContextSpec {
                vm: 1,
                profile: 0,
                create_at: 0,
                destroy_at: Some(39_600_000),
            }],
            churn: vec![ChurnSpec {
                vm: 2,
                profiles: vec![0],
                start_at: 1_980_000,
                every_cycles: 5_940_000,
                lifetime_cycles: 13_860_000,
                stop_at: Some(99_000_000),
            }],
            throttle: vec![ThrottleWindow {
                start: 19_800_000,
                end: 23_760_000,
            }],
            migrations: vec![MigrationSpec {
                at: 39_600_000,
                vm: 1,
                to: 2,
            }],
            oob: OobSpec {
                period_cycles: 99_000_000,
                host_timeout_cycles: 1_980_000_000,
            },
        };
        assert_eq!(parsed, Ok(expected));
    }

    #[test]
    fn minimal_scenario_gets_h100_defaults() {
        let s = ok("");
        assert_eq!(
            s.clock,
            ClockSpec {
                khz: 1_980_000,
                secondary_khz: 990_000
            }
        );
        assert_eq!(s.topology.sms_per_gpc.iter().sum::<u32>(), 132);
        assert_eq!(
            s.trigger,
            TriggerSpec {
                period_cycles: 1_980_000,
                dither: false,
                threshold: 268_434_944
            }
        );
        assert_eq!(
            s.stream,
            StreamSpec {
                ring_records: 1024,
                watermark: 512
            }
        );
        assert_eq!(s.switch_timeout_cycles, 3_960_000);
        assert_eq!(
            (
                s.partitions[0].ctx_timeslice_cycles,
                s.partitions[0].vm_timeslice_cycles
            ),
            (3_960_000, 7_920_000)
        );
        assert!(s.profiles.is_empty() && s.contexts.is_empty() && s.device_profile.is_none());
    }

    #[test]
    fn microseconds_convert_with_the_scenario_clock() {
        let s = ok("switch_timeout_us = 3\n[clock]\nkhz = 1500\n");
        assert_eq!(s.switch_timeout_cycles, 4);
        assert_eq!(s.clock.secondary_khz, 1000);
    }
}
