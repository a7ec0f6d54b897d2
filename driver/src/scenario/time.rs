//! Times in a scenario file: `<what>_us` or `<what>_cycles`, resolved to
//! device cycles at the nominal clock.

use std::ops::Range;

use super::error::SpanError;
use super::raw::{Cycles, Us};

/// A time quantity resolved to cycles, with the span of the key's value.
#[derive(Clone, Debug)]
pub(super) struct Cyc {
    pub cycles: u64,
    pub span: Range<usize>,
}

/// Converts times to cycles at the nominal clock.
#[derive(Clone, Copy, Debug)]
pub(super) struct Clock {
    khz: u32,
}

impl Clock {
    /// Converts at the nominal clock `khz`.
    pub fn nominal(khz: u32) -> Self {
        Clock { khz }
    }

    /// Resolves the `<what>_us` / `<what>_cycles` pair, if either is given.
    pub fn time(&self, what: &str, us: &Us, cycles: &Cycles) -> Result<Option<Cyc>, SpanError> {
        match (us, cycles) {
            (Some(u), Some(c)) => {
                let later = if u.span().start > c.span().start {
                    u.span()
                } else {
                    c.span()
                };
                Err(SpanError::new(
                    later,
                    format!("both `{what}_us` and `{what}_cycles` are given; give only one"),
                ))
            }
            (Some(u), None) => {
                let cycles = u128::from(*u.get_ref()) * u128::from(self.khz) / 1000;
                let cycles = u64::try_from(cycles).map_err(|_| {
                    SpanError::new(
                        u.span(),
                        format!(
                            "`{what}_us` = {} is too long: {cycles} cycles do not fit in 64 bits",
                            u.get_ref()
                        ),
                    )
                })?;
                Ok(Some(Cyc {
                    cycles,
                    span: u.span(),
                }))
            }
            (None, Some(c)) => Ok(Some(Cyc {
                cycles: *c.get_ref(),
                span: c.span(),
            })),
            (None, None) => Ok(None),
        }
    }

    /// Like [`Clock::time`], with `default_us` when neither key is given,
    /// for a quantity stored in 32 bits. Defaults are a few milliseconds,
    /// which fit in 32 bits at any clock up to `MAX_KHZ`.
    pub fn time_u32(
        &self,
        what: &str,
        us: &Us,
        cycles: &Cycles,
        default_us: u32,
    ) -> Result<u32, SpanError> {
        match self.time(what, us, cycles)? {
            Some(t) => fit_u32(what, &t),
            None => Ok(
                u32::try_from(u64::from(default_us) * u64::from(self.khz) / 1000)
                    .unwrap_or(u32::MAX),
            ),
        }
    }
}

/// `t` as a 32-bit cycle count.
pub(super) fn fit_u32(what: &str, t: &Cyc) -> Result<u32, SpanError> {
    u32::try_from(t.cycles).map_err(|_| {
        SpanError::new(
            t.span.clone(),
            format!(
                "{what} of {} cycles does not fit in 32 bits (at most {} cycles)",
                t.cycles,
                u32::MAX
            ),
        )
    })
}

/// A time that must be given; `table` locates the error when it is not.
pub(super) fn required(
    time: Clock,
    what: &str,
    us: &Us,
    cycles: &Cycles,
    table: Range<usize>,
) -> Result<Cyc, SpanError> {
    time.time(what, us, cycles)?.ok_or_else(|| {
        SpanError::new(
            table,
            format!("`{what}_us` or `{what}_cycles` is required here"),
        )
    })
}

/// The cycles of `t`, which must be non-zero.
pub(super) fn positive(what: &str, t: Cyc) -> Result<u64, SpanError> {
    if t.cycles == 0 {
        return Err(SpanError::new(
            t.span,
            format!("{what} must be greater than 0 cycles"),
        ));
    }
    Ok(t.cycles)
}
