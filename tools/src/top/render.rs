//! Rendering of the live view (ratatui), shared by `gpupm top` and
//! `gpupm demo`.

use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row as TRow, Table};
use ratatui::Frame;

use super::sample::Row;
use crate::derived::{self, get};

/// Sort keys (cycled with `s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SortKey {
    /// VM, then context id.
    Id,
    /// SM utilisation.
    Sm,
    /// Instructions per second.
    Inst,
    /// DRAM bytes per second.
    Dram,
    /// PCIe bytes per second.
    Pcie,
}

impl SortKey {
    /// The next key.
    pub fn next(self) -> SortKey {
        match self {
            SortKey::Id => SortKey::Sm,
            SortKey::Sm => SortKey::Inst,
            SortKey::Inst => SortKey::Dram,
            SortKey::Dram => SortKey::Pcie,
            SortKey::Pcie => SortKey::Id,
        }
    }

    fn value(self, r: &Row) -> f64 {
        match self {
            SortKey::Id => 0.0,
            SortKey::Sm => get(&r.metrics, "sm_utilisation").unwrap_or(0.0),
            SortKey::Inst => r.inst_per_s,
            SortKey::Dram => get(&r.metrics, "dram_bytes_per_s").unwrap_or(0.0),
            SortKey::Pcie => get(&r.metrics, "pcie_bytes_per_s").unwrap_or(0.0),
        }
    }
}

/// Orders rows: VMs by the key, each VM's contexts below it by the key.
pub fn sort(rows: &mut [Row], key: SortKey) {
    let vm_value: std::collections::HashMap<u32, f64> = rows
        .iter()
        .filter(|r| r.ctx.is_none())
        .map(|r| (r.vm, key.value(r)))
        .collect();
    rows.sort_by(|a, b| {
        let va = vm_value.get(&a.vm).copied().unwrap_or(0.0);
        let vb = vm_value.get(&b.vm).copied().unwrap_or(0.0);
        vb.total_cmp(&va)
            .then(a.vm.cmp(&b.vm))
            .then(a.ctx.is_some().cmp(&b.ctx.is_some()))
            .then(key.value(b).total_cmp(&key.value(a)))
            .then(a.ctx.cmp(&b.ctx))
    });
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{:.1}", x * 100.0))
}

fn rate(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), derived::bytes)
}

/// Draws one frame: a title line and the table.
pub fn draw(f: &mut Frame<'_>, title: &str, rows: &[Row], key: SortKey) {
    let [head, body] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(1)]).areas(f.area());
    f.render_widget(
        Paragraph::new(Line::from(format!(
            "{title}   sort: {key:?} (s: next key, q: quit)"
        ))),
        head,
    );
    let header = TRow::new([
        "VM",
        "CTX",
        "SM %",
        "IPC",
        "INST/s",
        "L2 HIT %",
        "DRAM/s",
        "PCIe/s",
        "INST TOTAL",
    ])
    .style(Style::default().add_modifier(Modifier::BOLD | Modifier::REVERSED));
    let body_rows = rows.iter().map(|r| {
        let ctx = r.ctx.map_or_else(|| "-".into(), |c| c.to_string());
        let cells: Vec<Cell<'_>> = if r.sealed {
            vec![r.vm.to_string().into(), ctx.into(), "sealed".into()]
        } else {
            vec![
                r.vm.to_string().into(),
                ctx.into(),
                pct(get(&r.metrics, "sm_utilisation")).into(),
                get(&r.metrics, "ipc")
                    .map_or_else(|| "-".into(), |x| format!("{x:.2}"))
                    .into(),
                format!("{:.3e}", r.inst_per_s).into(),
                pct(get(&r.metrics, "l2_hit_rate")).into(),
                rate(get(&r.metrics, "dram_bytes_per_s")).into(),
                rate(get(&r.metrics, "pcie_bytes_per_s")).into(),
                r.inst_total.to_string().into(),
            ]
        };
        let row = TRow::new(cells);
        if r.ctx.is_none() {
            row.style(Style::default().add_modifier(Modifier::BOLD))
        } else {
            row
        }
    });
    let widths = [4, 6, 6, 6, 10, 9, 11, 11, 14].map(Constraint::Length);
    let table = Table::new(body_rows, widths)
        .header(header)
        .block(Block::default().borders(Borders::TOP));
    f.render_widget(table, body);
}
