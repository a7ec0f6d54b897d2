//! The Debian package, built by `scripts/build-deb`:
//!
//! * it holds the four binaries, the units, sysusers and tmpfiles files
//!   (identical to the repository's), the conffile with every key of
//!   `daemon/gpupmd.toml` commented out, man pages for every command and
//!   subcommand, three shells' completions, the C header, the docs and
//!   examples, the Prometheus rules and the dashboard; the units' commands
//!   name binaries the package installs; the maintainer scripts are the
//!   debhelper snippets in the right order;
//! * lintian finds no error and only the warnings `docs/operations.md`
//!   lists;
//! * installed with `apt-get` into a clean Debian container booted with
//!   systemd (`container.rs`), both services start and become ready,
//!   `gpupm list`/`stat` work for the admin and for a tenant configured in
//!   the conffile, `systemctl restart gpupmd` loses no count (step clock,
//!   the device's ledger read from outside the container), and `apt-get
//!   remove` then `purge` leave no unit, process, mount, user or state.
//!
//! Needs root, `/dev/fuse`, cargo-deb, help2man, lintian, systemd-nspawn
//! and the test tree of `scripts/make-test-rootfs` (`scripts/test-all`
//! installs and makes them all).

mod install;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use gpupm_deploy_tests::package::{self, documented_lintian_warnings, Unpacked};
use gpupm_deploy_tests::repo;

const BINARIES: [&str; 4] = ["gpupm", "gpupmd", "gpupm-driver", "gpupm-mount"];

/// `(repository file, installed path)`: shipped unchanged.
const SHIPPED_AS_IS: [(&str, &str); 22] = [
    (
        "packaging/deb/lintian-overrides",
        "/usr/share/lintian/overrides/gpupm",
    ),
    (
        "packaging/factory/vendor-root.key",
        "/usr/lib/gpupm/factory/vendor-root.key",
    ),
    (
        "systemd/gpupm-driver.service",
        "/usr/lib/systemd/system/gpupm-driver.service",
    ),
    (
        "systemd/gpupmd.service",
        "/usr/lib/systemd/system/gpupmd.service",
    ),
    ("systemd/gpupm.sysusers", "/usr/lib/sysusers.d/gpupm.conf"),
    ("systemd/gpupm.tmpfiles", "/usr/lib/tmpfiles.d/gpupm.conf"),
    (
        "include/gpupm/gpupm_uapi.h",
        "/usr/include/gpupm/gpupm_uapi.h",
    ),
    ("README.md", "/usr/share/doc/gpupm/README.md"),
    ("docs/operations.md", "/usr/share/doc/gpupm/operations.md"),
    (
        "examples/c/Makefile",
        "/usr/share/doc/gpupm/examples/c/Makefile",
    ),
    (
        "examples/c/tenant_stat.c",
        "/usr/share/doc/gpupm/examples/c/tenant_stat.c",
    ),
    (
        "examples/python/gpupm_tenant.py",
        "/usr/share/doc/gpupm/examples/python/gpupm_tenant.py",
    ),
    (
        "examples/python/tenant_stat.py",
        "/usr/share/doc/gpupm/examples/python/tenant_stat.py",
    ),
    (
        "examples/c/tenant_ri.c",
        "/usr/share/doc/gpupm/examples/c/tenant_ri.c",
    ),
    (
        "examples/c/tenant_ranges.c",
        "/usr/share/doc/gpupm/examples/c/tenant_ranges.c",
    ),
    (
        "examples/python/tenant_ri.py",
        "/usr/share/doc/gpupm/examples/python/tenant_ri.py",
    ),
    (
        "examples/python/tenant_ranges.py",
        "/usr/share/doc/gpupm/examples/python/tenant_ranges.py",
    ),
    (
        "deploy/prometheus/gpupm-recording.rules.yml",
        "/usr/share/gpupm/prometheus/gpupm-recording.rules.yml",
    ),
    (
        "deploy/prometheus/gpupm-alerts.rules.yml",
        "/usr/share/gpupm/prometheus/gpupm-alerts.rules.yml",
    ),
    (
        "deploy/grafana/gpupm.json",
        "/usr/share/gpupm/grafana/gpupm.json",
    ),
    (
        "deploy/prometheus/gpupm-scrape.yml",
        "/usr/share/gpupm/prometheus/gpupm-scrape.yml",
    ),
    (
        "packaging/metrics-web.yml",
        "/usr/share/doc/gpupm/examples/metrics-web.yml",
    ),
];

#[test]
fn package_holds_what_it_promises_and_runs_the_debhelper_snippets_in_order() {
    let pkg = package::build();
    let deb = Unpacked::new(&pkg.path);
    let files = deb.files();

    for b in BINARIES {
        let path = format!("/usr/bin/{b}");
        let mode = fs::metadata(deb.file(&path))
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755, "{path}");
    }
    // The emulated factory's vendor key: root only (docs/confidential.md).
    let key = fs::metadata(deb.file("/usr/lib/gpupm/factory/vendor-root.key"))
        .expect("the vendor key in the package");
    assert_eq!(key.permissions().mode() & 0o777, 0o600);
    for (from, to) in SHIPPED_AS_IS {
        let want = fs::read(repo().join(from)).unwrap_or_else(|e| panic!("{from}: {e}"));
        let got = fs::read(deb.file(to)).unwrap_or_else(|e| panic!("{to} in the package: {e}"));
        assert!(want == got, "{to} differs from {from}");
    }
    for path in [
        "/usr/share/doc/gpupm/changelog.Debian.gz",
        "/usr/share/doc/gpupm/copyright",
        "/usr/share/bash-completion/completions/gpupm",
        "/usr/share/zsh/vendor-completions/_gpupm",
        "/usr/share/fish/vendor_completions.d/gpupm.fish",
        "/usr/share/man/man1/gpupm.1.gz",
        "/usr/share/man/man8/gpupmd.8.gz",
        "/usr/share/man/man8/gpupm-driver.8.gz",
        "/usr/share/man/man8/gpupm-mount.8.gz",
    ] {
        assert!(files.contains(path), "{path} missing from {files:#?}");
    }
    // One man page per subcommand, as `gpupm --help` lists them.
    let help = install::run_ok(&deb.file("/usr/bin/gpupm"), &["--help"]);
    let subcommands: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .expect("gpupm --help lists commands")
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        // A command starts its line after two spaces; a description
        // wrapped at 80 columns continues further in.
        .filter(|l| l.starts_with("  ") && !l[2..].starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(subcommands.len() >= 10, "{help}");
    for sub in subcommands {
        let page = format!("/usr/share/man/man1/gpupm-{sub}.1.gz");
        assert!(files.contains(&page), "no man page {page}");
    }

    // The units start only what the package installs.
    for unit in ["gpupm-driver.service", "gpupmd.service"] {
        let text =
            fs::read_to_string(deb.file(&format!("/usr/lib/systemd/system/{unit}"))).expect("unit");
        for line in text.lines().filter(|l| l.starts_with("Exec")) {
            let (_, cmd) = line.split_once('=').expect("Exec*=");
            // Prefixes: `-` (failure ignored), `+` (full privileges), `!`, `@`, `:`.
            let binary = cmd
                .trim_start_matches(['-', '+', '!', '@', ':'])
                .split(' ')
                .next()
                .unwrap_or("");
            assert!(
                files.contains(binary),
                "{unit}: {line} runs {binary}, which the package does not install"
            );
        }
    }

    let changelog = fs::read_to_string(repo().join("packaging/deb/changelog")).expect("changelog");
    assert!(
        changelog.starts_with(&format!("gpupm ({}) ", package::deb_version())),
        "packaging/deb/changelog needs an entry for {}",
        package::deb_version()
    );
    check_conffile(&deb);
    check_maintainer_scripts(&deb);
    let control = deb.control("control");
    eprintln!(
        "package {} ({} bytes, {}), built in {:.1} s",
        pkg.path.display(),
        fs::metadata(&pkg.path).expect("the .deb").len(),
        control
            .lines()
            .find(|l| l.starts_with("Installed-Size:"))
            .unwrap_or("no Installed-Size"),
        pkg.build_time.as_secs_f64()
    );
}

/// `/etc/gpupm/gpupmd.toml` is a conffile, holds every key and table of
/// `daemon/gpupmd.toml` commented out, and nothing uncommented.
fn check_conffile(deb: &Unpacked) {
    assert_eq!(deb.control("conffiles").trim(), "/etc/gpupm/gpupmd.toml");
    let shipped = fs::read_to_string(deb.file("/etc/gpupm/gpupmd.toml")).expect("the conffile");
    let active: Vec<&str> = shipped
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .collect();
    assert!(
        active.is_empty(),
        "uncommented lines in the conffile: {active:?}"
    );
    let documented = fs::read_to_string(repo().join("daemon/gpupmd.toml")).expect("gpupmd.toml");
    let keys: Vec<&str> = documented
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#') && !l.starts_with(' '))
        .collect();
    assert!(keys.len() >= 15, "{keys:?}");
    for key in keys {
        assert!(
            shipped.lines().any(|l| l == format!("# {key}")),
            "the conffile lacks the commented {key:?}"
        );
    }
}

/// postinst: users (systemd-sysusers), the conffile's owner and mode,
/// then directories (systemd-tmpfiles), then the units enabled
/// (deb-systemd-helper) and started (deb-systemd-invoke); prerm stops
/// them; postrm purges the units' state, then removes the conffile's
/// override, users and state on purge.
fn check_maintainer_scripts(deb: &Unpacked) {
    let postinst = deb.control("postinst");
    let order = [
        "systemd-sysusers ${DPKG_ROOT:+--root=\"$DPKG_ROOT\"} gpupm.conf",
        "systemd-tmpfiles --create gpupm.conf",
        "deb-systemd-helper enable gpupm-driver.service",
        "deb-systemd-invoke $_dh_action gpupm-driver.service",
        "deb-systemd-helper enable gpupmd.service",
        "deb-systemd-invoke $_dh_action gpupmd.service",
    ];
    let mut at = 0;
    for step in order {
        let found = postinst[at..]
            .find(step)
            .unwrap_or_else(|| panic!("postinst lacks {step:?} after byte {at}:\n{postinst}"));
        at += found + step.len();
    }
    // The conffile's owner and mode (root:gpupm-admin 0640) are set once
    // the group exists and before the units start.
    let override_at = postinst
        .find("dpkg-statoverride --update --add root gpupm-admin 0640 \"$CONFIG\"")
        .unwrap_or_else(|| panic!("postinst sets no owner and mode on the conffile:\n{postinst}"));
    let sysusers_at = postinst.find("systemd-sysusers").expect("sysusers");
    let first_start = postinst
        .find("deb-systemd-invoke $_dh_action")
        .expect("units started");
    assert!(
        sysusers_at < override_at && override_at < first_start,
        "postinst: the group, then the override, then the units:\n{postinst}"
    );
    let prerm = deb.control("prerm");
    for unit in ["gpupm-driver.service", "gpupmd.service"] {
        assert!(
            prerm.contains(&format!("deb-systemd-invoke stop {unit}")),
            "prerm does not stop {unit}:\n{prerm}"
        );
    }
    let postrm = deb.control("postrm");
    let purge_units = postrm
        .find("deb-systemd-helper purge gpupm-driver.service")
        .expect("postrm purges the driver unit's state");
    let userdel = postrm.find("userdel").expect("postrm removes the users");
    assert!(
        purge_units < userdel,
        "units purged before users:\n{postrm}"
    );
    let unoverride = postrm
        .find("dpkg-statoverride --remove /etc/gpupm/gpupmd.toml")
        .expect("postrm removes the conffile's override on purge");
    let groupdel = postrm.find("groupdel").expect("postrm removes the groups");
    assert!(
        unoverride < groupdel,
        "override removed before the group:\n{postrm}"
    );
    for script in ["postinst", "prerm", "postrm"] {
        let out = std::process::Command::new("sh")
            .arg("-n")
            .arg(deb.control_path(script))
            .output()
            .expect("sh -n");
        assert!(out.status.success(), "{script}: {out:?}");
    }
}

#[test]
fn lintian_finds_no_error_and_only_the_documented_warnings() {
    let pkg = package::build();
    let (findings, text) = package::lintian(&pkg.path);
    eprintln!("lintian --display-level '>=pedantic':\n{text}");
    let errors: Vec<_> = findings.iter().filter(|f| f.severity == 'E').collect();
    assert!(errors.is_empty(), "lintian errors: {errors:#?}");
    let warnings: std::collections::BTreeSet<String> = findings
        .iter()
        .filter(|f| f.severity == 'W')
        .map(|f| f.tag.clone())
        .collect();
    assert_eq!(
        warnings,
        documented_lintian_warnings(),
        "lintian's warnings and the ones docs/operations.md explains differ"
    );
}

#[test]
fn package_installs_serves_admin_and_tenant_keeps_counts_over_restart_and_purges_clean() {
    install::run(&package::build().path);
}
