//! Rendering of the live view (ratatui), shared by `gpupm top` and
//! `gpupm demo`.
//!
//! No number is ever cut: each column is as wide as its values need (a
//! total grows to its every digit when the screen has room, else it is
//! scaled: `1.35 T`); columns that do not fit are left out by priority and
//! named in the title line (`hidden: …`), and rows that do not fit are
//! counted in a last line (`… N more rows`).

use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row as TRow, Table};
use ratatui::Frame;

use super::sample::Row;
use crate::derived::get;
use crate::numfmt::{fit_count, fit_f64, si};

/// Sort keys (cycled with `s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SortKey {
    /// VM, then context id.
    Id,
    /// SM utilization.
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
            SortKey::Sm => get(&r.metrics, "sm_utilization").unwrap_or(0.0),
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

/// The view's columns, in screen order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Col {
    Vm,
    Ctx,
    Sm,
    Ipc,
    InstRate,
    L2Hit,
    Dram,
    Pcie,
    InstTotal,
}

impl Col {
    const ALL: [Col; 9] = [
        Col::Vm,
        Col::Ctx,
        Col::Sm,
        Col::Ipc,
        Col::InstRate,
        Col::L2Hit,
        Col::Dram,
        Col::Pcie,
        Col::InstTotal,
    ];

    /// Which columns stay when the screen is narrow: lower first.
    const BY_PRIORITY: [Col; 9] = [
        Col::Vm,
        Col::Ctx,
        Col::Sm,
        Col::InstRate,
        Col::InstTotal,
        Col::Ipc,
        Col::Dram,
        Col::L2Hit,
        Col::Pcie,
    ];

    fn head(self) -> &'static str {
        match self {
            Col::Vm => "VM",
            Col::Ctx => "CTX",
            Col::Sm => "SM %",
            Col::Ipc => "IPC",
            Col::InstRate => "INST/s",
            Col::L2Hit => "L2 HIT %",
            Col::Dram => "DRAM/s",
            Col::Pcie => "PCIe/s",
            Col::InstTotal => "INST TOTAL",
        }
    }

    /// The narrowest the column may be: its heading, and room for any
    /// value once scaled (`999 kB`, `18.4 E`).
    fn min_width(self) -> usize {
        let value = match self {
            Col::Vm | Col::Ctx => 3,
            Col::Sm => 6, // "sealed"
            Col::Ipc | Col::L2Hit => 5,
            Col::InstRate | Col::InstTotal => 6,
            Col::Dram | Col::Pcie => 7,
        };
        value.max(self.head().len())
    }

    /// The text of `r` in this column, at most `width` characters when
    /// the value allows.
    fn cell(self, r: &Row, width: usize) -> String {
        let m = &r.metrics;
        match self {
            Col::Vm => r.vm.to_string(),
            Col::Ctx => r.ctx.map_or_else(|| "-".into(), |c| c.to_string()),
            _ if r.sealed => {
                if self == Col::Sm {
                    "sealed".into()
                } else {
                    "-".into()
                }
            }
            Col::Sm => opt(get(m, "sm_utilization"), |v| fit_f64(v * 100.0, width, 1)),
            Col::Ipc => opt(get(m, "ipc"), |v| fit_f64(v, width, 2)),
            Col::InstRate => fit_f64(r.inst_per_s, width, 0),
            Col::L2Hit => opt(get(m, "l2_hit_rate"), |v| fit_f64(v * 100.0, width, 1)),
            Col::Dram => opt(get(m, "dram_bytes_per_s"), bytes),
            Col::Pcie => opt(get(m, "pcie_bytes_per_s"), bytes),
            Col::InstTotal => fit_count(r.inst_total, width),
        }
    }
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

/// Bytes (per second) with an SI prefix: `3.35 TB`, `640 B`.
fn bytes(v: f64) -> String {
    let s = si(v, 0);
    if s.ends_with(|c: char| c.is_ascii_alphabetic()) {
        s + "B"
    } else {
        s + " B"
    }
}

/// The columns that fit `width` and each one's width: by priority at
/// their minimum, then the room left widens the total column to every
/// digit (with separators) of the largest total.
fn layout(width: usize, rows: &[Row]) -> (Vec<(Col, usize)>, Vec<Col>) {
    let mut shown: Vec<Col> = Vec::new();
    let mut used = 0;
    let mut hidden = Vec::new();
    for col in Col::BY_PRIORITY {
        let need = col.min_width() + usize::from(!shown.is_empty());
        if used + need <= width {
            used += need;
            shown.push(col);
        } else {
            hidden.push(col);
        }
    }
    let total_want = rows
        .iter()
        .map(|r| crate::numfmt::thousands(r.inst_total).len())
        .max()
        .unwrap_or(0);
    let mut cols: Vec<(Col, usize)> = Col::ALL
        .iter()
        .filter(|c| shown.contains(c))
        .map(|&c| (c, c.min_width()))
        .collect();
    for (c, w) in &mut cols {
        // Room for the widest value at full precision, when there is room.
        let want = match c {
            Col::InstTotal => total_want,
            Col::Vm | Col::Ctx => rows
                .iter()
                .map(|r| c.cell(r, usize::MAX).len())
                .max()
                .unwrap_or(0),
            _ => *w,
        };
        let grow = want.saturating_sub(*w).min(width.saturating_sub(used));
        *w += grow;
        used += grow;
    }
    hidden.sort_by_key(|c| Col::ALL.iter().position(|x| x == c));
    (cols, hidden)
}

/// Draws one frame: a title line and the table.
pub fn draw(f: &mut Frame<'_>, title: &str, rows: &[Row], key: SortKey) {
    let [head, body] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(1)]).areas(f.area());
    let (cols, hidden) = layout(usize::from(f.area().width), rows);
    let mut title = format!("{title}   sort: {key:?} (s: next key, q: quit)");
    if !hidden.is_empty() {
        let names: Vec<&str> = hidden.iter().map(|c| c.head()).collect();
        title += &format!("   hidden: {} (widen the terminal)", names.join(", "));
    }
    f.render_widget(Paragraph::new(Line::from(title)), head);
    let header = TRow::new(cols.iter().map(|(c, _)| Cell::from(c.head())))
        .style(Style::default().add_modifier(Modifier::BOLD | Modifier::REVERSED));
    // The border line and the header take two lines.
    let room = usize::from(body.height).saturating_sub(2);
    let (fit, more) = if rows.len() > room {
        (room.saturating_sub(1), rows.len() - room.saturating_sub(1))
    } else {
        (rows.len(), 0)
    };
    let body_rows = rows[..fit].iter().map(|r| {
        let row = TRow::new(cols.iter().map(|&(c, w)| Cell::from(c.cell(r, w))));
        if r.ctx.is_none() {
            row.style(Style::default().add_modifier(Modifier::BOLD))
        } else {
            row
        }
    });
    let widths: Vec<Constraint> = cols
        .iter()
        .map(|&(_, w)| Constraint::Length(u16::try_from(w).unwrap_or(u16::MAX)))
        .collect();
    let table = Table::new(body_rows, widths)
        .header(header)
        .block(Block::default().borders(Borders::TOP));
    if more == 0 {
        f.render_widget(table, body);
        return;
    }
    let [table_area, marker] =
        Layout::vertical([Constraint::Min(1), Constraint::Length(1)]).areas(body);
    f.render_widget(table, table_area);
    f.render_widget(
        Paragraph::new(Line::from(format!(
            "… {more} more rows (a taller terminal shows them)"
        ))),
        marker,
    );
}

/// One frame as plain text lines (`gpupm top` without a terminal, `-b`):
/// the same columns, as wide as `width` allows, every row.
pub fn text(title: &str, rows: &[Row], width: usize) -> String {
    let (cols, hidden) = layout(width, rows);
    let mut out = title.to_string();
    if !hidden.is_empty() {
        let names: Vec<&str> = hidden.iter().map(|c| c.head()).collect();
        out += &format!("   hidden: {}", names.join(", "));
    }
    out.push('\n');
    let line = |cells: Vec<String>| -> String {
        let mut l = String::new();
        for (i, (cell, &(_, w))) in cells.iter().zip(&cols).enumerate() {
            if i > 0 {
                l.push(' ');
            }
            l += &format!("{cell:<w$}");
        }
        l.trim_end().to_string() + "\n"
    };
    out += &line(cols.iter().map(|(c, _)| c.head().to_string()).collect());
    for r in rows {
        out += &line(cols.iter().map(|&(c, w)| c.cell(r, w)).collect());
    }
    out
}
