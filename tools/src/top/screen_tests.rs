//! The live view (`gpupm top`, `gpupm demo`) drawn at 80×24 and 160×45
//! into ratatui's test backend: every number on the screen is read back
//! and compared with the row it came from — a number may be scaled
//! (`1.35 T`) but never cut, and a column or row that does not fit is
//! dropped with a marker.

use ratatui::backend::TestBackend;
use ratatui::Terminal;

use super::render::{self, SortKey};
use super::sample::Row;
use crate::derived::{get, Metric};
use crate::numfmt::parse_shown;

fn metric(name: &'static str, value: f64) -> Metric {
    Metric { name, value }
}

/// A demanding screen: totals of 10^12 and more, rates of 10^12 per
/// second, small and large contexts, a sealed VM; and many contexts, more
/// than 24 lines hold.
fn rows() -> Vec<Row> {
    let mut rows = Vec::new();
    let mut add = |vm, ctx, inst_total: u64, inst_per_s: f64, sm: f64| {
        rows.push(Row {
            vm,
            ctx,
            sealed: false,
            metrics: vec![
                metric("sm_utilization", sm),
                metric("ipc", 3.217),
                metric("l2_hit_rate", 0.8734),
                metric("dram_bytes_per_s", 3.35e12),
                metric("pcie_bytes_per_s", 63_999_999_999.0),
            ],
            inst_per_s,
            inst_total,
        });
    };
    add(1, None, 1_351_873_171_624, 1.352e12, 0.981);
    add(1, Some(1), 99_874_512_003, 7.5e11, 0.5);
    add(1, Some(2), 1_251_998_659_621, 6.0e11, 0.48);
    add(2, None, 18_446_744_073_709_551_615, 2.5e3, 0.001);
    for c in 10..40 {
        add(2, Some(c), 1000 + u64::from(c), 1.0, 0.0001);
    }
    rows.push(Row {
        vm: 4,
        ctx: None,
        sealed: true,
        metrics: Vec::new(),
        inst_per_s: 0.0,
        inst_total: 0,
    });
    rows
}

/// The screen as lines of text.
fn screen(width: u16, height: u16, rows: &mut [Row]) -> Vec<String> {
    let mut term = Terminal::new(TestBackend::new(width, height)).unwrap();
    render::sort(rows, SortKey::Id);
    term.draw(|f| render::draw(f, "gpupm top — test", rows, SortKey::Id))
        .unwrap();
    let buf = term.backend().buffer().clone();
    (0..height)
        .map(|y| {
            (0..width)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
        })
        .collect()
}

/// Every column header the view may show, and how a shown value is
/// compared with its row: `None` for the id columns.
const COLUMNS: [&str; 9] = [
    "VM",
    "CTX",
    "SM %",
    "IPC",
    "INST/s",
    "L2 HIT %",
    "DRAM/s",
    "PCIe/s",
    "INST TOTAL",
];

/// The value a column shows for `r`.
fn source(col: &str, r: &Row) -> Option<f64> {
    #[allow(clippy::cast_precision_loss)]
    Some(match col {
        "SM %" => get(&r.metrics, "sm_utilization")? * 100.0,
        "IPC" => get(&r.metrics, "ipc")?,
        "INST/s" => r.inst_per_s,
        "L2 HIT %" => get(&r.metrics, "l2_hit_rate")? * 100.0,
        "DRAM/s" => get(&r.metrics, "dram_bytes_per_s")?,
        "PCIe/s" => get(&r.metrics, "pcie_bytes_per_s")?,
        "INST TOTAL" => r.inst_total as f64,
        _ => return None,
    })
}

/// A shown value read back: units (`B`, `/s`) dropped, SI prefixes applied.
fn read_back(cell: &str) -> Option<(f64, f64)> {
    let cell = cell.trim().trim_end_matches("/s").trim_end_matches('B');
    let cell = cell.trim_end();
    // "3.35 T" (after "B" went) or "3.35T".
    parse_shown(cell).or_else(|| {
        let (n, p) = cell.split_at(cell.len().checked_sub(1)?);
        parse_shown(&format!("{} {p}", n.trim()))
    })
}

/// Checks one screen: every number against its row; the rows and columns
/// left out are announced.
fn check(width: u16, height: u16) {
    let mut data = rows();
    let lines = screen(width, height, &mut data);
    let text = lines.join("\n");
    let head_at = lines
        .iter()
        .position(|l| l.trim_start().starts_with("VM"))
        .unwrap_or_else(|| panic!("no header at {width}x{height}:\n{text}"));
    let head = &lines[head_at];
    let mut starts: Vec<(usize, &str)> = COLUMNS
        .iter()
        .filter_map(|c| head.find(&format!(" {c} ")).map(|i| (i + 1, *c)))
        .collect();
    starts.push((0, "VM"));
    starts.sort_unstable();
    starts.dedup();
    let shown_cols: Vec<&str> = starts.iter().map(|s| s.1).collect();
    if shown_cols.len() < COLUMNS.len() {
        assert!(
            text.contains("hidden"),
            "{width}x{height}: columns dropped without a marker:\n{text}"
        );
    }
    let mut seen = 0;
    for line in &lines[head_at + 1..] {
        let cells: Vec<&str> = starts
            .iter()
            .enumerate()
            .map(|(i, &(at, _))| {
                let end = starts.get(i + 1).map_or(line.len(), |s| s.0);
                line.get(at..end.min(line.len())).unwrap_or("").trim()
            })
            .collect();
        let Ok(vm) = cells[0].parse::<u32>() else {
            continue;
        };
        let ctx = match cells.get(1).copied() {
            Some("-") | None => None,
            Some(c) => Some(c.parse::<u32>().unwrap()),
        };
        let row = data
            .iter()
            .find(|r| r.vm == vm && r.ctx == ctx)
            .unwrap_or_else(|| panic!("{width}x{height}: no row {vm}/{ctx:?}:\n{text}"));
        seen += 1;
        for (col, cell) in shown_cols.iter().zip(&cells).skip(2) {
            if row.sealed {
                assert!(
                    *cell == "-" || cell.is_empty() || *cell == "sealed",
                    "{width}x{height}: a sealed VM shows {cell:?} in {col}"
                );
                continue;
            }
            let want = source(col, row).unwrap();
            let (got, err) = read_back(cell).unwrap_or_else(|| {
                panic!("{width}x{height}: {col} of {vm}/{ctx:?} is {cell:?}:\n{text}")
            });
            assert!(
                (got - want).abs() <= err * 1.000_001,
                "{width}x{height}: {col} of {vm}/{ctx:?} shows {cell:?} for {want}:\n{text}"
            );
        }
    }
    if seen < data.len() {
        assert!(
            text.contains("more"),
            "{width}x{height}: {} rows left out without a marker:\n{text}",
            data.len() - seen
        );
    }
}

#[test]
fn every_number_on_an_80x24_screen_is_its_rows() {
    check(80, 24);
}

#[test]
fn every_number_on_a_160x45_screen_is_its_rows() {
    check(160, 45);
}
